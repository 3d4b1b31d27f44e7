//! Prometheus' OpenMetrics text of the collector's counters, for `/metrics` of the live API
//! and of the fabric API.

use intscope_core::counters::{self, Samples};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The OpenMetrics text of `samples`, one family per declared metric (HELP, TYPE, UNIT), encoded
/// by prometheus-client (names, label escaping, `_total`, `# EOF`).
pub fn text(samples: Samples) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(Encoded(samples)));
    let mut out = String::new();
    let _ = encode(&mut out, &reg);
    out
}

fn encode_value(
    e: &mut MetricEncoder,
    kind: counters::Kind,
    v: counters::Value,
) -> std::fmt::Result {
    use counters::{Kind, Value as V};
    match (kind, v) {
        (Kind::Counter, V::Int(n)) => e.encode_counter::<NoLabelSet, _, u64>(&n, None),
        (Kind::Counter, V::Float(x)) => e.encode_counter::<NoLabelSet, _, u64>(&x, None),
        (Kind::Gauge, V::Int(n)) => e.encode_gauge(&n),
        (Kind::Gauge, V::Float(x)) => e.encode_gauge(&x),
    }
}

/// Samples handed to prometheus-client's encoder.
#[derive(Debug)]
struct Encoded(Samples);

impl prometheus_client::collector::Collector for Encoded {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        use counters::Kind;
        for (m, samples) in self.0.families() {
            let unit = m.unit.map(|u| Unit::Other(u.to_string()));
            let ty = match m.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let name = format!("{}_{}", counters::PREFIX, m.name);
            let mut me = enc.encode_descriptor(&name, m.help, unit.as_ref(), ty)?;
            for s in samples {
                let labels: Vec<(String, String)> = m
                    .labels
                    .iter()
                    .zip(&s.labels)
                    .map(|(k, v)| ((*k).to_string(), v.clone()))
                    .collect();
                if labels.is_empty() {
                    encode_value(&mut me, m.kind, s.value)?;
                } else {
                    encode_value(&mut me.encode_family(&labels)?, m.kind, s.value)?;
                }
            }
        }
        Ok(())
    }
}

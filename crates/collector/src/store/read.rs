//! What the store's reads return: typed rows, the same types both backends build and the API
//! (`/api/history/*`, `/api/fabric/*`, `intscope serve`) serializes, so a backend cannot answer
//! in a shape the other does not (schemas in `docs/collector-api.openapi.yaml`, checked by
//! `tests/openapi.rs`).

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;

use intscope_core::{EventKind, FlowRef, Incident, PathHop};

use super::{HistoryQuery, StoreError};
use crate::view::FlowSummary;
use std::time::Duration;

/// A row type a [`Page`] lists, with the key its rows go under in the page's JSON.
pub trait Listed {
    /// The page's key (`{"<KEY>": [...], "next": cursor}`).
    const KEY: &'static str;
}

/// One page of a history list: `{"<T::KEY>": [rows], "next": cursor}`, `next` being the cursor
/// of the next page (`null` on the last).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The rows, in the list's order.
    pub items: Vec<T>,
    /// Pass back as `cursor` for the next page; `None` on the last.
    pub next: Option<String>,
    /// The series' resolution (series only: `{"resolution": "raw" | "1m"}` in the JSON).
    pub resolution: Option<Resolution>,
}

impl<T> Page<T> {
    /// The page of at most `limit` rows from `rows` (each with its cursor), fetched `limit + 1`
    /// at a time: a row beyond `limit` means there is a next page, from the last row kept.
    pub(crate) fn of(mut rows: Vec<(T, String)>, limit: u32) -> Self {
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next = more.then(|| rows.last().map(|(_, c)| c.clone())).flatten();
        Page {
            items: rows.into_iter().map(|(v, _)| v).collect(),
            next,
            resolution: None,
        }
    }

    /// The page, marked as a series of `resolution`.
    pub(crate) fn at(mut self, resolution: Resolution) -> Self {
        self.resolution = Some(resolution);
        self
    }
}

impl<T: Listed + Serialize> Serialize for Page<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2 + usize::from(self.resolution.is_some())))?;
        m.serialize_entry(T::KEY, &self.items)?;
        m.serialize_entry("next", &self.next)?;
        if let Some(r) = self.resolution {
            m.serialize_entry("resolution", &r)?;
        }
        m.end()
    }
}

/// The resolution of a stored series: each store interval as written (`raw`, one row per
/// flush), or per minute from the rollups (`1m`). A query picks it by its range
/// ([`HistoryQuery::pick_resolution`]) unless it names one (`resolution=raw|1m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Resolution {
    /// One row per store interval (flush).
    #[serde(rename = "raw")]
    Raw,
    /// One row per minute (UTC minutes of the rows' time), from the 1-minute rollups: sums of
    /// samples, maxima of maxima, means weighted by samples; `time_ns` is the minute's start.
    #[serde(rename = "1m")]
    Minute,
}

/// Default of [`HistoryQuery::rollup_after`]: a range longer than an hour (3 600 raw rows per
/// series at the default one-second flush) is answered per minute (at most 60 times fewer
/// rows).
pub const DEFAULT_ROLLUP_AFTER: Duration = Duration::from_secs(3600);

/// A minute in ns.
pub(crate) const MINUTE_NS: u64 = 60_000_000_000;

impl HistoryQuery {
    /// The resolution this query is answered at: the one it names, else per minute when its
    /// range (`since` to `until`, or to now) is longer than `rollup_after` (default
    /// [`DEFAULT_ROLLUP_AFTER`]), else raw. No `since` is a page from the oldest row on: raw.
    pub fn pick_resolution(&self) -> Resolution {
        if let Some(r) = self.resolution {
            return r;
        }
        let Some(since) = self.since else {
            return Resolution::Raw;
        };
        let until = self.until.unwrap_or_else(crate::clock::now_ns);
        let after = self.rollup_after.unwrap_or(DEFAULT_ROLLUP_AFTER);
        if until.saturating_sub(since) > after.as_nanos() as u64 {
            Resolution::Minute
        } else {
            Resolution::Raw
        }
    }
}

/// Raw intervals of one flow (oldest first) folded into minutes, oldest first: samples summed,
/// the mean weighted by samples (rounded down, as the store's means are), maxima of maxima
/// hop by hop. Both stores fold a flow's series here, so they answer alike.
pub(crate) fn flow_minutes(raw: impl IntoIterator<Item = FlowInterval>) -> Vec<FlowInterval> {
    let mut out: Vec<(FlowInterval, u128, u64)> = Vec::new();
    let hop_max = |a: &mut Vec<Option<u32>>, b: &[Option<u32>]| {
        if a.len() < b.len() {
            a.resize(b.len(), None);
        }
        for (x, y) in a.iter_mut().zip(b) {
            *x = match (*x, *y) {
                (Some(p), Some(q)) => Some(p.max(q)),
                (p, q) => p.or(q),
            };
        }
    };
    for r in raw {
        let minute = r.time_ns - r.time_ns % MINUTE_NS;
        let weighted = r
            .e2e_latency_avg
            .map_or(0, |a| u128::from(a) * u128::from(r.samples));
        let with_avg = if r.e2e_latency_avg.is_some() {
            r.samples
        } else {
            0
        };
        match out.last_mut() {
            Some((m, sum, n)) if m.time_ns == minute => {
                m.samples += r.samples;
                *sum += weighted;
                *n += with_avg;
                m.e2e_latency_max = m.e2e_latency_max.max(r.e2e_latency_max);
                hop_max(&mut m.hop_latency_max, &r.hop_latency_max);
                hop_max(&mut m.queue_occupancy_max, &r.queue_occupancy_max);
            }
            _ => out.push((
                FlowInterval {
                    time_ns: minute,
                    ..r
                },
                weighted,
                with_avg,
            )),
        }
    }
    out.into_iter()
        .map(|(mut m, sum, n)| {
            m.e2e_latency_avg = (n > 0).then(|| (sum / u128::from(n)) as u64);
            m
        })
        .collect()
}

impl Listed for FlowSummary {
    const KEY: &'static str = "flows";
}

/// One queue's occupancy over one store interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueInterval {
    /// End of the interval (the flush's time), ns.
    pub time_ns: u64,
    /// Node.
    pub node_id: u32,
    /// Egress port.
    pub port: u32,
    /// Queue (0 where the reports carry none).
    pub queue_id: u8,
    /// Occupancy samples in the interval.
    pub samples: u64,
    /// Their mean.
    pub avg_occupancy: f64,
    /// Their maximum.
    pub max_occupancy: u64,
}

impl Listed for QueueInterval {
    const KEY: &'static str = "queues";
}

/// One flow's latency over one store interval (per-hop arrays source first, ending at the last
/// hop with a value).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowInterval {
    /// End of the interval, ns.
    pub time_ns: u64,
    /// Latency samples in it.
    pub samples: u64,
    /// Mean end-to-end latency, ns.
    pub e2e_latency_avg: Option<u64>,
    /// Largest end-to-end latency, ns.
    pub e2e_latency_max: Option<u64>,
    /// Largest hop latency per hop, ns.
    pub hop_latency_max: Vec<Option<u32>>,
    /// Largest queue occupancy per hop.
    pub queue_occupancy_max: Vec<Option<u32>>,
}

/// A stored event: the live [`Event`](intscope_core::Event) without its receive time, which the
/// store does not keep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    /// Its ID.
    pub id: u64,
    /// When (report time), ns.
    pub time_ns: u64,
    /// What.
    pub kind: EventKind,
    /// Node.
    pub node_id: Option<u32>,
    /// Port.
    pub port: Option<u32>,
    /// Queue.
    pub queue_id: Option<u8>,
    /// The flow's API ID in the collector that raised it.
    pub flow_id: Option<u64>,
    /// The flow.
    pub flow: Option<FlowRef>,
    /// The kind-specific evidence as the live event serves it: kept as its JSON, since the
    /// evidence types only serialize (each kind's fields: the OpenAPI `Event` schema).
    pub evidence: Value,
    /// The incident it belonged to when stored ([`intscope_core::Event::incident_id`]; the
    /// store takes an event once linked, or once its link wait is over): `None` for an event
    /// no incident followed, and for events stored by schema 2 and before.
    pub incident_id: Option<u64>,
}

impl Listed for StoredEvent {
    const KEY: &'static str = "events";
}

/// A stored incident: the newest version the store was given of an
/// [`Incident`], read back from the JSON it was stored as,
/// its evidence left as that JSON (`tests/store.rs` checks the round trip).
pub type StoredIncident = Incident<Value>;

impl Listed for StoredIncident {
    const KEY: &'static str = "incidents";
}

/// Rows per table (`counts`, `rows_stored`), by table name.
pub type RowCounts = BTreeMap<String, u64>;

/// The collector's counters summed over every run that wrote to the store, by name.
pub type Totals = BTreeMap<String, u64>;

/// Why a stored value could not be read back: the store holds text it did not write (a
/// foreign or damaged file), answered as an error naming the row rather than a silent `null`.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// A path stored as JSON text.
pub(crate) fn parse_path(text: &str) -> Result<Vec<PathHop>, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("stored flow path", e))
}

/// Per-hop values stored as JSON text.
pub(crate) fn parse_hops(text: &str) -> Result<Vec<Option<u32>>, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("stored per-hop values", e))
}

/// An event kind stored as its label.
pub(crate) fn parse_kind(label: &str) -> Result<EventKind, StoreError> {
    serde_json::from_value(Value::String(label.into())).map_err(|e| corrupt("stored event kind", e))
}

/// Evidence stored as JSON text.
pub(crate) fn parse_evidence(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("stored event evidence", e))
}

/// An incident stored as JSON text.
pub(crate) fn parse_incident(text: &str) -> Result<StoredIncident, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("stored incident", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_serializes_under_its_key_with_its_cursor() {
        let row = |t| QueueInterval {
            time_ns: t,
            node_id: 1,
            port: 2,
            queue_id: 0,
            samples: 3,
            avg_occupancy: 1.5,
            max_occupancy: 4,
        };
        let rows = vec![(row(1), "q.1.0".into()), (row(2), "q.2.0".into())];
        let p = Page::of(rows.clone(), 1);
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"queues": [{"time_ns": 1, "node_id": 1, "port": 2, "queue_id": 0,
                "samples": 3, "avg_occupancy": 1.5, "max_occupancy": 4}], "next": "q.1.0"})
        );
        let last = Page::of(rows, 2);
        assert_eq!(last.items.len(), 2);
        assert_eq!(serde_json::to_value(&last).unwrap()["next"], Value::Null);
    }

    #[test]
    fn text_the_store_did_not_write_is_an_error() {
        assert!(matches!(parse_path("[{]"), Err(StoreError::Corrupt(_))));
        assert!(matches!(
            parse_kind("no-such-kind"),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(parse_incident("{}"), Err(StoreError::Corrupt(_))));
        assert_eq!(parse_kind("drop").unwrap(), EventKind::Drop);
        assert_eq!(parse_hops("[1,null,3]").unwrap(), [Some(1), None, Some(3)]);
    }
}

//! Flows caught in a forwarding loop keep their real keys (issue 29): INT-MD over TCP puts the
//! original TCP header behind the stack (NPT=2), and a looping packet's stack grows past the
//! report's truncation; the collector must still see the ports, not list the flow under ports 0.

use intscope_collector::hub::{Collector, CollectorConfig};
use intscope_core::RecordBatch;
use intscope_node::Mode;
use intscope_sim::{Fabric, Fault, Scheduled, SimConfig, default_mix};

const MS: u64 = 1_000_000;

#[test]
fn looping_tcp_flows_keep_their_ports() {
    let until = 30 * MS;
    let mut fabric = Fabric::new(SimConfig {
        mode: Mode::Md,
        ..SimConfig::default()
    })
    .unwrap();
    let mix = default_mix(fabric.topology(), 48, 7, until);
    let looped_tcp = mix
        .iter()
        .filter(|f| f.proto == 6 && intscope_sim::topology::locate(f.dst).is_some_and(|d| d.0 == 3))
        .count();
    assert!(looped_tcp > 0, "the mix sends TCP into the loop");
    for f in mix {
        fabric.add_flow(f);
    }
    fabric.schedule(Scheduled {
        from_ns: 5 * MS,
        until_ns: until,
        fault: Fault::Loop {
            spine: 1,
            leaf: 2,
            dst_leaf: 3,
        },
    });
    let c = Collector::open(CollectorConfig {
        data: None,
        int_udp_ports: vec![17768],
        ..CollectorConfig::default()
    })
    .unwrap();
    let mut batch = RecordBatch::default();
    let mut t = 0;
    while t < until {
        t += 5 * MS;
        fabric.run(t);
        for r in fabric.take_reports() {
            c.ingest(&r.payload, r.source.into(), r.time_ns, &mut batch);
        }
    }
    let s = c.state.read();
    let tcp: Vec<_> = s
        .flows()
        .filter(|f| f.key.proto == 6)
        .map(|f| f.key)
        .collect();
    assert!(!tcp.is_empty());
    let invented: Vec<_> = tcp
        .iter()
        .filter(|k| k.src_port == 0 || k.dst_port == 0)
        .collect();
    assert!(invented.is_empty(), "TCP flows under ports 0: {invented:?}");
    assert_eq!(s.flow_count(), 48, "one flow per flow of the mix, no more");
}

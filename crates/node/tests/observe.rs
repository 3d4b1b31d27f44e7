//! `Node::observe`, the report-only node of a host agent: postcards when the caller's flow
//! filter lets one through, queue reports within SD-Fabric's quota otherwise, nothing edited.

use etherparse::PacketBuilder;
use intscope_node::config::TelemetryModel;
use intscope_node::filter::{FilterConfig, QueueThreshold};
use intscope_node::{Mode, Node, NodeConfig, StaticTelemetry};
use intscope_wire::report::{GROUP_LEN, IndividualHeaderRepr};

fn frame(dst: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 1, 1, 1], dst, 64)
        .udp(40000, 5001)
        .write(&mut f, &[0; 200])
        .unwrap();
    // Cut after the headers, as the agent captures it.
    f.truncate(14 + 20 + 8 + 16);
    f
}

fn tel(latency: u32) -> StaticTelemetry {
    StaticTelemetry {
        model: TelemetryModel {
            hop_latency_ns: latency,
            ..TelemetryModel::default()
        },
        time_ns: 1_000_000,
    }
}

/// The Q and F flags of a v2.0 report datagram's first individual report.
fn q_and_f(report: &[u8]) -> (bool, bool) {
    let h = IndividualHeaderRepr::parse(&report[GROUP_LEN..]).unwrap();
    (h.q, h.f)
}

#[test]
fn queue_reports_within_the_quota_postcards_when_due() {
    let mut node = Node::new(NodeConfig {
        node_id: 7,
        mode: Mode::Xd,
        watch_subnets: vec!["10.1.3.0/24".parse().unwrap()],
        filters: FilterConfig {
            queues: vec![QueueThreshold {
                queue_id: 0,
                trigger_ns: 1000,
                reset_ns: Some(500),
            }],
            queue_quota: 2,
            ..FilterConfig::default()
        },
        ..NodeConfig::default()
    })
    .unwrap();
    let watched = frame([10, 1, 3, 1]);
    let before = watched.clone();
    // A postcard the caller's filter let through: F, not Q (latency under the trigger).
    let r = node.observe(&watched, &tel(100), true).unwrap();
    assert_eq!(q_and_f(&r), (false, true));
    // Held back by the caller's filter, congested: queue reports up to the quota.
    assert!(
        node.observe(&watched, &tel(5000), false)
            .is_some_and(|r| q_and_f(&r) == (true, true))
    );
    assert!(node.observe(&watched, &tel(5000), false).is_some());
    assert_eq!(
        node.observe(&watched, &tel(5000), false),
        None,
        "quota spent"
    );
    // Under the reset threshold: no report, the quota refilled.
    assert_eq!(node.observe(&watched, &tel(100), false), None);
    assert!(node.observe(&watched, &tel(5000), false).is_some());
    // An unwatched packet in the congested queue: a queue report without F.
    let other = frame([192, 168, 0, 1]);
    let r = node.observe(&other, &tel(5000), false).unwrap();
    assert_eq!(q_and_f(&r), (true, false));
    assert_eq!(watched, before, "nothing edited");
}

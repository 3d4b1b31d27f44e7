#![no_main]
//! Entry point: `Node::process` (and `drop_report`) of every role, mode and encapsulation over
//! arbitrary frames, then a sink over what the first node forwarded. The first bytes choose the
//! configuration (always a valid one); the rest is the frame. Nothing may panic.
use intscope_node::config::{HexBytes, MtuAction, TelemetryModel};
use intscope_node::filter::{FilterConfig, QueueThreshold};
use intscope_node::{Mode, Node, NodeConfig, Role, SourceEncap, StaticTelemetry, WatchEntry};
use libfuzzer_sys::fuzz_target;

const ROLES: [Role; 3] = [Role::Source, Role::Transit, Role::Sink];
const MODES: [Mode; 3] = [Mode::Md, Mode::Mx, Mode::Xd];
const ENCAPS: [SourceEncap; 7] = [
    SourceEncap::Dscp,
    SourceEncap::UdpPort,
    SourceEncap::UdpNew,
    SourceEncap::ProbeMarker,
    SourceEncap::Gre,
    SourceEncap::VxlanGpe,
    SourceEncap::Geneve,
];

fn config(role: Role, sel: &[u8; 4]) -> NodeConfig {
    NodeConfig {
        role,
        mode: MODES[usize::from(sel[0]) % 3],
        encap: ENCAPS[usize::from(sel[0] / 3) % 7],
        // Baseline bits 0-7, maybe the Checksum Complement: at most 13 words per hop.
        instructions: (u16::from(sel[1]) << 8) | u16::from(sel[2] & 1),
        mtu: if sel[2] & 2 != 0 { 200 } else { 1500 },
        on_mtu_exceeded: if sel[2] & 4 != 0 {
            MtuAction::IntermediateReport
        } else {
            MtuAction::MBit
        },
        use_checksum_complement: sel[2] & 8 != 0,
        destination_headers: sel[2] & 128 != 0,
        probe_marker: Some(HexBytes(0x1122_3344_5566_7788u64.to_be_bytes().to_vec())),
        watchlist: vec![WatchEntry {
            clone: sel[2] & 16 != 0,
            destination: HexBytes(if sel[2] & 32 != 0 {
                vec![0, 0, 0, 1]
            } else {
                vec![]
            }),
            ..WatchEntry::default()
        }],
        filters: FilterConfig {
            enabled: sel[2] & 64 != 0,
            queues: vec![QueueThreshold {
                queue_id: 0,
                trigger_ns: 100,
                reset_ns: None,
            }],
            ..FilterConfig::default()
        },
        telemetry: TelemetryModel {
            hop_latency_ns: u32::from(sel[3]) * 4,
            ..TelemetryModel::default()
        },
        ..NodeConfig::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((sel, frame)) = data.split_first_chunk::<4>() else {
        return;
    };
    let role = ROLES[usize::from(sel[3]) % 3];
    let Ok(mut node) = Node::new(config(role, sel)) else {
        return;
    };
    let Ok(mut sink) = Node::new(config(Role::Sink, sel)) else {
        return;
    };
    let tel = StaticTelemetry {
        model: node.config().telemetry.clone(),
        time_ns: 1_000,
    };
    let mut f = frame.to_vec();
    let out = node.process(&mut f, &tel);
    let _ = node.drop_report(frame, 71, &tel);
    let _ = sink.process(&mut f, &tel);
    for mut copy in out.synthetic {
        let _ = sink.process(&mut copy, &tel);
    }
});

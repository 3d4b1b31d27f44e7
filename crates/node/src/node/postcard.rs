//! The roles that report instead of (or besides) carrying metadata: INT-XD postcards (INT v2.1
//! §"INT Application Modes": "all nodes generate postcards" for watched flows, the packet
//! untouched) and INT-MX reports (each node "directly send[s] the metadata to the monitoring
//! system by following the instructions embedded in the packets").

use super::Node;
use super::report::{DsFields, mx_body};
use super::watch::Watch;
use crate::telemetry::Telemetry;
use intscope_wire::int::AnyShim;
use intscope_wire::locate::FlowKey;
use intscope_wire::mx::MxHeaderRepr;

impl Node {
    /// INT-XD: this node's postcard about a watched packet, when the flow filter lets one through
    /// or its queue is congested.
    pub(super) fn postcard(
        &mut self,
        frame: &[u8],
        w: &Watch,
        tel: &dyn Telemetry,
        congested: bool,
    ) -> Option<Vec<u8>> {
        let r = self.report(
            frame,
            w.instructions,
            tel,
            true,
            Some(w.key),
            w.wants.flow,
            congested,
            DsFields::of_watch(w, None),
        );
        self.stats.postcards += u64::from(r.is_some());
        r
    }

    /// INT-MX at a transit hop or the sink: this node's metadata as the INT-MX header at `off`
    /// instructs, with its source-inserted metadata as the domain wants it reported.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mx_report(
        &mut self,
        frame: &[u8],
        off: usize,
        shim: AnyShim,
        h: &MxHeaderRepr,
        flow: Option<FlowKey>,
        tel: &dyn Telemetry,
        congested: bool,
    ) -> Option<Vec<u8>> {
        let body = mx_body(frame, off, shim);
        let r = self.report(
            frame,
            h.instructions,
            tel,
            true,
            flow,
            true,
            congested,
            DsFields::of_mx(h, Some(body)),
        );
        self.stats.mx_reports += u64::from(r.is_some());
        r
    }
}

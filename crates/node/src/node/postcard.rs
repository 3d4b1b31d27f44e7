//! The roles that report instead of (or besides) carrying metadata: INT-XD postcards (INT v2.1
//! §"INT Application Modes": "all nodes generate postcards" for watched flows, the packet
//! untouched) and INT-MX reports (each node "directly send[s] the metadata to the monitoring
//! system by following the instructions embedded in the packets").

use super::Node;
use super::report::{About, ReportRequest};
use super::watch::Watch;
use crate::frame::Layout;
use crate::telemetry::Telemetry;
use intscope_wire::locate::{Packet, Start};

impl Node {
    /// INT-XD: this node's postcard about a watched packet, when the flow filter lets one through
    /// or its queue is congested.
    pub(super) fn postcard(
        &mut self,
        frame: &[u8],
        w: Watch,
        tel: &dyn Telemetry,
        congested: bool,
    ) -> Option<Vec<u8>> {
        let about = About::Postcard(w);
        let r = self.report(frame, tel, ReportRequest { about, congested });
        self.stats.postcards += u64::from(r.is_some());
        r
    }

    /// INT-MX: this node's report of its metadata, as the source's watchlist entry or the INT-MX
    /// header in the packet instructs (`r.about`).
    pub(super) fn mx_report(
        &mut self,
        frame: &[u8],
        tel: &dyn Telemetry,
        r: ReportRequest<'_>,
    ) -> Option<Vec<u8>> {
        let r = self.report(frame, tel, r);
        self.stats.mx_reports += u64::from(r.is_some());
        r
    }
}

impl Node {
    /// A report-only node that watches packets without forwarding them (a host agent observing
    /// the kernel, a tap): this node's INT-XD postcard of a watched packet, or its queue report
    /// of another packet whose queue is congested. `frame` may be cut after its headers:
    /// nothing is edited, so the lengths it declares need not be whole. `flow_report` false:
    /// the caller's own flow filter held the postcard back, and only a queue report (within
    /// the quota) may go; the node's flow filter applies as configured either way.
    pub fn observe(
        &mut self,
        frame: &[u8],
        tel: &dyn Telemetry,
        flow_report: bool,
    ) -> Option<Vec<u8>> {
        self.stats.frames += 1;
        let Ok(p) = Packet::parse(frame, Start::Ethernet, &self.detect) else {
            self.stats.malformed += 1;
            return None;
        };
        let report_traffic = Layout::of(&p).is_some_and(|l| self.is_report(&l, frame));
        let watch = match &p.flow {
            Some(flow) if !report_traffic => self.watched(tel, flow, p.inner_flow.as_ref()),
            _ => None,
        };
        let congested = self.filter.has_queues()
            && !report_traffic
            && watch.is_none_or(|w| self.watch.get(w).wants.queue)
            && self.congested(tel);
        let report = match watch {
            Some(w) if flow_report => {
                self.stats.report_only += 1;
                self.postcard(frame, w, tel, congested)
            }
            Some(_) => {
                self.stats.report_only += 1;
                self.queue_report(frame, tel, congested, true)
            }
            None => {
                self.stats.untouched += 1;
                self.queue_report(frame, tel, congested, false)
            }
        };
        self.stats.reports += u64::from(report.is_some());
        report
    }
}

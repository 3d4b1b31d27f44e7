//! The report loss detector: a sequence gap the tracker confirmed (`seq::SeqTracker::confirm`:
//! no reordered report filled it in time) is an event, rate-limited, and the source's report
//! loss incident (one per node and hardware ID).

use crate::event::{EventKind, Place, Raiser};
use crate::evidence::Evidence;
use crate::incident::{IncidentKind, IncidentPlace, Unit};
use crate::incidents::{IncidentKey, Observation};
use crate::seq::Confirmed;

/// Raises the loss gap `c` confirmed.
pub(crate) fn raise(raiser: &mut Raiser, c: Confirmed) {
    raiser.reports_lost(c.node, c.reports, c.received_ns);
    let place = Place {
        node: Some(c.node),
        ..Place::default()
    };
    let key = IncidentKey::new(
        IncidentKind::ReportLoss,
        IncidentPlace {
            node: Some(c.node),
            hw_id: Some(c.hw_id),
            ..IncidentPlace::default()
        },
        None,
    );
    raiser.raise_at(
        c.received_ns,
        c.received_ns,
        EventKind::LostReports,
        place,
        u64::from(c.hw_id),
        Some(&key),
        || Evidence::LostReports {
            hw_id: c.hw_id,
            lost: c.groups,
            reports_lost: c.reports,
            expected_seq: c.expected_seq,
            received_seq: c.received_seq,
        },
    );
    let o = Observation {
        samples: 1,
        reports: 0,
        reports_lost: c.reports,
        value: Some((c.reports, Unit::Reports)),
        // The reports went missing after the source's last one in order.
        start_uncertainty_ns: c.received_ns.saturating_sub(c.since_ns),
        ..Observation::sample(c.received_ns, c.received_ns)
    };
    raiser.observe(key, &o, || Evidence::LostReports {
        hw_id: c.hw_id,
        lost: c.groups,
        reports_lost: c.reports,
        expected_seq: c.expected_seq,
        received_seq: c.received_seq,
    });
}

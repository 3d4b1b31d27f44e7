//! Incidents by cause: one fault, one incident.
//!
//! The lifecycle engine (`incidents`) follows each *symptom* — one kind of evidence at
//! one place (congestion at a queue, latency at a port, drops of one reason at a node) — with its
//! own start, updates and end. A fault shows several: a slow port congests its queue, holds
//! packets long and tail-drops; a loop expires TTLs, hits the INT hop limit and queues the
//! looping packets at every hop of the loop. This module groups the symptoms of one fault into
//! one [`Incident`] whose kind, place and cause are its root cause's, the others listed in
//! [`Incident::symptoms`] with their places and spans.
//!
//! The rules (`docs/detection.md`, "How incidents are formed"). A new symptom joins a held
//! incident that is ongoing, or ended at most `incident_merge_ns` (switch time) before the
//! symptom started, when:
//! 1. **same port**: both are queue symptoms — congestion, microburst, latency, queue drops
//!    (`traffic-manager`, `wred`) — at one (node, egress port), or the symptom is a queue at a
//!    port where the incident's packets expire in a loop;
//! 2. **one device or cable**: flows returning to a link or node (`link-restored`,
//!    `node-restored`) join the incident of the flows that left it; silent drops on the two
//!    directions of one link are one cable; hops without INT found while others are ongoing
//!    are the one device that stopped adding INT (or joined without it) that they all cross;
//!    a node whose reports stopped (report-loss `silent`), hops without INT named at it, and
//!    the sequence gap its reports come back with are its reporting outage; drops at a
//!    failed link's ends (or at a failed node) that start within `incident_merge_ns` of the
//!    failure are its routes converging; drops of frames too big (`mtu-check-fail`, or the
//!    `kernel-unspecified` of a veth that takes no larger frame) at a node with a small MTU or
//!    on a port that leads to it are that MTU, its links' ends changing one after the other;
//!    without an MTU incident (INT-XD adds no INT to be too big), such drops on ports that lead
//!    to one node, or at it, starting within `incident_merge_ns` of each other, are that node's;
//!    a neighbour not resolved (`next-id-miss`) at either end of a silently dropping link, and
//!    hops without INT named at one of its ends, are that cable, which eats the address
//!    resolution and the packets a hop would have reported;
//! 3. **a loop**: the incident's root is a hop limit or a TTL expiry, or the symptom is, and the
//!    symptom's flows mostly go where the incident's go (at least half of the smaller set of
//!    destination addresses is shared);
//! 4. **upstream**: a queue symptom (congestion, microburst, latency) at another port whose
//!    flows mostly go where a queue or loop incident's go (the senders of an incast meet at
//!    the spines on their way to its host; a loop holds up what shares its links).
//!
//! The first rule that holds decides (in this order, then the oldest incident). The root is the
//! member of the highest rank — hop limit, TTL expiry, congestion or microburst, queue drop,
//! latency, MTU — then with more flows (the bottleneck an incast converges on), then the
//! earliest; among the kinds of rule 2, the earliest (at a silent node: its gap, then hops
//! without INT); a failed link or node is the root of whatever joined it. Other report loss,
//! path changes and drops of other reasons (a routing miss, an ACL) away from a failure are
//! never joined: each is a fault in itself.
//!
//! Lifecycle: an incident is ongoing while its root is, or another symptom shows evidence after
//! the root ended; it ends at the latest end (or newest evidence) among them.
//!
//! Bounds: at most [`MAX_SYMPTOMS`] symptoms per incident (a symptom past it starts an incident
//! of its own); of the resolved incidents, the newest `keep_resolved` per root kind (the engine
//! gives its own bound, 1024; the older ones are dropped, counted). Ongoing incidents are
//! bounded by the engine's ongoing symptoms, each of which belongs to one incident.

use std::collections::VecDeque;
use std::net::Ipv6Addr;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::incident::{
    Incident, IncidentKind, IncidentPlace, IncidentState, MAX_INCIDENT_FLOWS, Symptom,
};

/// Most symptoms one incident gathers (its root included).
pub const MAX_SYMPTOMS: usize = 64;

/// Drop reasons of a full queue: symptoms of congestion at the same port.
const QUEUE_DROPS: [&str; 2] = ["traffic-manager", "wred"];
/// Drop reasons of an expired TTL: a loop's signature.
const TTL_DROPS: [&str; 3] = ["ip-ttl-zero", "outer-ip-ttl-zero", "ttl4"];

/// How strongly a symptom names a fault: the root of an incident is its member of the highest
/// rank. 0: never grouped.
fn rank(kind: IncidentKind, cause: Option<&str>) -> u8 {
    match kind {
        IncidentKind::HopLimit => 6,
        IncidentKind::Drop if cause.is_some_and(|c| TTL_DROPS.contains(&c)) => 5,
        IncidentKind::Congestion | IncidentKind::Microburst => 4,
        IncidentKind::Drop if cause.is_some_and(|c| QUEUE_DROPS.contains(&c)) => 3,
        IncidentKind::Latency => 2,
        IncidentKind::Mtu => 1,
        _ => 0,
    }
}

fn rank_of(i: &Incident) -> u8 {
    rank(i.kind, i.cause.as_deref())
}

/// A loop's own symptoms: hop limit and TTL expiry.
const LOOP_RANK: u8 = 5;
/// Congestion and microbursts.
const QUEUE_RANK: u8 = 4;

/// A queue symptom at a port (rule 1).
fn at_port(i: &Incident) -> bool {
    matches!(rank_of(i), 2..=4)
}

/// A fault and its symptoms.
#[derive(Debug, Clone)]
struct Group {
    /// What is published: the root's incident under the group's ID, with the others as
    /// symptoms.
    inc: Incident,
    /// The symptoms as the engine last handed them over, in the order they joined.
    members: Vec<Incident>,
    /// The change counter at its last change ([`Causes::take_changed`]).
    version: u64,
    /// Receive time from which it is published; `None` once it is.
    pending_until: Option<u64>,
}

/// IDs of incidents not yet published count down from here (published IDs count up from 1,
/// given out in order of publication, so no ID is skipped).
const PENDING_IDS: u64 = u64::MAX;

/// The incidents by cause: every symptom the engine follows belongs to one.
#[derive(Debug)]
pub(crate) struct Causes {
    merge_ns: u64,
    /// Resolved incidents kept per root kind.
    keep_resolved: usize,
    grouping_ns: u64,
    /// What a gathering founded by a drop waits on top of `grouping_ns` ([`Causes::new`]).
    converge_ns: u64,
    next_id: u64,
    next_pending: u64,
    version: u64,
    taken: u64,
    /// Every incident held, pending, ongoing and resolved, by ID.
    groups: HashMap<u64, Group>,
    /// Published resolved incidents by root kind, oldest first.
    resolved: [VecDeque<u64>; 9],
    /// Published ongoing incidents by root kind.
    ongoing_by_kind: [usize; 9],
    /// The incident each held symptom (by its engine ID) belongs to.
    member_of: HashMap<u64, u64>,
    /// Incidents published, by their root's kind then.
    pub started: [u64; 9],
    /// Incidents dropped from the resolved history, by root kind.
    pub dropped: [u64; 9],
}

fn kind_index(kind: IncidentKind) -> usize {
    IncidentKind::ALL
        .iter()
        .position(|&k| k == kind)
        .unwrap_or(0)
}

type Status = (IncidentState, IncidentKind);

impl Causes {
    /// Incidents that gather symptoms for `grouping_ns` (receive time) before they are
    /// published, and take symptoms that start within `merge_ns` (switch time) of their end;
    /// the newest `keep_resolved` resolved ones of each root kind are kept. A gathering that a
    /// drop founds (not a loop's) waits `merge_ns` and `correlation_ns` longer: its drops may
    /// be a link's or node's failure seen first at its ends, which the path correlation names
    /// once the flows have moved, up to `merge_ns` later and `correlation_ns` after that (rule
    /// 2 then takes the drops into the outage, which only a gathering can join).
    pub(crate) fn new(
        merge_ns: u64,
        grouping_ns: u64,
        correlation_ns: u64,
        keep_resolved: usize,
    ) -> Self {
        Causes {
            merge_ns,
            keep_resolved,
            grouping_ns,
            converge_ns: merge_ns.saturating_add(correlation_ns),
            next_id: 1,
            next_pending: PENDING_IDS,
            version: 0,
            taken: 0,
            groups: HashMap::default(),
            resolved: Default::default(),
            ongoing_by_kind: [0; 9],
            member_of: HashMap::default(),
            started: [0; 9],
            dropped: [0; 9],
        }
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }

    pub(crate) fn continue_ids(&mut self, next: u64) {
        self.next_id = self.next_id.max(next);
    }

    fn published(&self) -> impl Iterator<Item = &Group> {
        self.groups.values().filter(|g| g.pending_until.is_none())
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Incident> {
        self.published().map(|g| &g.inc)
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Incident> {
        self.groups
            .get(&id)
            .filter(|g| g.pending_until.is_none())
            .map(|g| &g.inc)
    }

    pub(crate) fn ongoing(&self, kind: IncidentKind) -> usize {
        self.ongoing_by_kind[kind_index(kind)]
    }

    pub(crate) fn resolved(&self, kind: IncidentKind) -> usize {
        self.resolved[kind_index(kind)].len()
    }

    /// The published incident symptom `symptom` (the engine's ID) belongs to; `None` while
    /// that incident still gathers, or once it left the history.
    pub(crate) fn incident_of(&self, symptom: u64) -> Option<u64> {
        let gid = *self.member_of.get(&symptom)?;
        self.groups
            .get(&gid)
            .is_some_and(|g| g.pending_until.is_none())
            .then_some(gid)
    }

    /// Incidents still gathering their symptoms.
    pub(crate) fn pending(&self) -> usize {
        self.groups.len() - self.published().count()
    }

    pub(crate) fn take_changed(&mut self) -> Vec<Incident> {
        let taken = self.taken;
        let mut out: Vec<Incident> = self
            .published()
            .filter(|g| g.version > taken)
            .map(|g| g.inc.clone())
            .collect();
        out.sort_by_key(|i| i.id);
        self.taken = self.version;
        out
    }

    pub(crate) fn forget_changed(&mut self) {
        self.taken = self.version;
    }

    /// The engine's symptom `s` started or changed: it joins (or updates) its incident. A
    /// symptom of an incident not yet published looks for a home again at each change (its
    /// first evidence may not have named its flows yet): if it finds one, the incident it
    /// was gathering goes there whole.
    pub(crate) fn update(&mut self, s: &Incident) {
        self.version += 1;
        let version = self.version;
        let gid = match self.member_of.get(&s.id) {
            Some(&gid) => {
                let pending = self
                    .groups
                    .get(&gid)
                    .is_some_and(|g| g.pending_until.is_some());
                match pending.then(|| self.home_of(s, gid)).flatten() {
                    Some(home) => {
                        // The whole gathering goes: its other symptoms are of the same fault
                        // (they joined it by the rules).
                        if let Some(g) = self.groups.remove(&gid) {
                            for m in g.members.into_iter().filter(|m| m.id != s.id) {
                                self.member_of.insert(m.id, home);
                                if let Some(h) = self.groups.get_mut(&home) {
                                    h.members.push(m);
                                }
                            }
                        }
                        self.member_of.insert(s.id, home);
                        home
                    }
                    None => gid,
                }
            }
            None => {
                let gid = self.home_of(s, 0).unwrap_or_else(|| {
                    self.next_pending -= 1;
                    self.next_pending
                });
                self.member_of.insert(s.id, gid);
                gid
            }
        };
        if is_outage(s) {
            self.absorb_converging(gid, s);
        }
        let mut grouping_ns = self.grouping_ns;
        if may_converge(s) {
            grouping_ns = grouping_ns.saturating_add(self.converge_ns);
        }
        let g = self.groups.entry(gid).or_insert_with(|| Group {
            inc: s.clone(),
            members: Vec::new(),
            version,
            pending_until: Some(s.received_ns.unwrap_or(0).saturating_add(grouping_ns)),
        });
        let was = status(g);
        match g.members.iter_mut().find(|m| m.id == s.id) {
            Some(m) => m.clone_from(s),
            None => g.members.push(s.clone()),
        }
        g.version = version;
        g.inc = publish(gid, &g.members);
        let now = status(g);
        if let (Some(was), Some(now)) = (was, now)
            && was != now
        {
            self.moved(gid, Some(was), now);
        }
        if now.is_none() && self.grouping_ns == 0 {
            self.publish_now(gid);
        }
    }

    /// A failed link or node `s` (in incident `gid`) takes the incidents still gathering that
    /// hold drops at its ends ([`converging`]): a drop report comes before the flows' move is
    /// correlated, so each end's drops may have started a gathering of their own.
    fn absorb_converging(&mut self, gid: u64, s: &Incident) {
        let merge_ns = self.merge_ns;
        let strays: Vec<u64> = self
            .groups
            .iter()
            .filter(|&(&h, g)| {
                h != gid
                    && g.pending_until.is_some()
                    && g.members.len() < MAX_SYMPTOMS
                    && g.members.iter().any(|m| converging(m, s, merge_ns))
            })
            .map(|(&h, _)| h)
            .collect();
        for h in strays {
            let Some(g) = self.groups.remove(&h) else {
                continue;
            };
            for m in g.members {
                self.member_of.insert(m.id, gid);
                if let Some(home) = self.groups.get_mut(&gid) {
                    home.members.push(m);
                } else {
                    // `gid` is a new gathering: `s` founds it below, with these beside it.
                    self.groups.insert(
                        gid,
                        Group {
                            inc: m.clone(),
                            members: vec![m],
                            version: self.version,
                            pending_until: g.pending_until,
                        },
                    );
                }
            }
        }
    }

    /// Publishes the incidents whose symptoms were gathered by receive time `now_rx`
    /// (`u64::MAX`: all of them), in the order they started.
    pub(crate) fn publish_due(&mut self, now_rx: u64) {
        let mut due: Vec<(u64, u64)> = self
            .groups
            .iter()
            .filter(|(_, g)| g.pending_until.is_some_and(|t| t <= now_rx))
            .map(|(&gid, g)| (g.inc.start_ns, gid))
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort_unstable();
        for (_, pending) in due {
            self.publish_now(pending);
        }
    }

    /// Publishes pending incident `pending` under the next ID.
    fn publish_now(&mut self, pending: u64) {
        let Some(mut g) = self.groups.remove(&pending) else {
            return;
        };
        let id = self.next_id;
        self.next_id += 1;
        self.version += 1;
        g.version = self.version;
        g.pending_until = None;
        g.inc.id = id;
        for m in &g.members {
            self.member_of.insert(m.id, id);
        }
        self.started[kind_index(g.inc.kind)] += 1;
        let now = (g.inc.state, g.inc.kind);
        self.groups.insert(id, g);
        self.moved(id, None, now);
    }

    /// Keeps the per-kind lists right after published incident `gid` went from `was` to `now`
    /// (state and root kind).
    fn moved(&mut self, gid: u64, was: Option<Status>, now: Status) {
        match was {
            Some((IncidentState::Ongoing, k)) => {
                let i = kind_index(k);
                self.ongoing_by_kind[i] = self.ongoing_by_kind[i].saturating_sub(1);
            }
            Some((IncidentState::Resolved, k)) => {
                self.resolved[kind_index(k)].retain(|&id| id != gid);
            }
            None => {}
        }
        match now {
            (IncidentState::Ongoing, k) => self.ongoing_by_kind[kind_index(k)] += 1,
            (IncidentState::Resolved, k) => {
                let list = &mut self.resolved[kind_index(k)];
                list.push_back(gid);
                if list.len() > self.keep_resolved
                    && let Some(old) = list.pop_front()
                {
                    self.dropped[kind_index(k)] += 1;
                    if let Some(g) = self.groups.remove(&old) {
                        for m in &g.members {
                            self.member_of.remove(&m.id);
                        }
                    }
                }
            }
        }
    }

    /// The incident other than `own` that symptom `s` belongs to by the rules above, if any.
    fn home_of(&self, s: &Incident, own: u64) -> Option<u64> {
        let r = rank_of(s);
        if r == 0
            && !is_repair(s)
            && !is_silent(s)
            && !is_outage(s)
            && !matches!(
                s.kind,
                IncidentKind::NonIntHops | IncidentKind::ReportLoss | IncidentKind::Drop
            )
        {
            return None;
        }
        let dsts: HashSet<Ipv6Addr> = s.flows.iter().map(|f| f.flow.dst).collect();
        let mut best: Option<(u8, u64, u64)> = None;
        for (&gid, g) in &self.groups {
            if gid == own || g.members.len() >= MAX_SYMPTOMS || !self.current(g, s) {
                continue;
            }
            let Some(rule) = joins(s, r, &dsts, g, self.merge_ns) else {
                continue;
            };
            // The first rule, then the oldest incident: a HashMap's order must not decide.
            let candidate = (rule, g.inc.start_ns, gid);
            if best.is_none_or(|b| candidate < b) {
                best = Some(candidate);
            }
        }
        best.map(|(_, _, gid)| gid)
    }

    /// Whether `g` is ongoing, or ended at most the merge window before `s` started.
    fn current(&self, g: &Group, s: &Incident) -> bool {
        match g.inc.end_ns {
            None => true,
            Some(end) => s.start_ns <= end.saturating_add(self.merge_ns),
        }
    }
}

/// A published incident's state and root kind (`None` while pending).
fn status(g: &Group) -> Option<Status> {
    g.pending_until
        .is_none()
        .then_some((g.inc.state, g.inc.kind))
}

/// Packets lost between two hops without a drop report.
fn is_silent(s: &Incident) -> bool {
    s.kind == IncidentKind::Drop && s.cause.as_deref() == Some("silent")
}

/// A node whose reports stopped as a whole (report-loss `silent`, rule 2).
fn is_node_silence(s: &Incident) -> bool {
    s.kind == IncidentKind::ReportLoss && s.cause.as_deref() == Some("silent")
}

/// Hops without INT named at one node (the device behind every port they were found at).
fn is_hidden_node(s: &Incident) -> bool {
    s.kind == IncidentKind::NonIntHops && s.place.node.is_some() && s.place.port.is_none()
}

/// Whether new symptom `s` and member `m` are one device's reporting outage (rule 2): a node
/// whose reports stopped, hops without INT named at it, and the sequence gap its reports come
/// back with. The gap must be newer than what it explains and reach back to its start, and one
/// of its gaps must have lost at least a report per flow the hops without INT name: a report
/// loss that was going on before (a lossy report network) explains no silence.
fn one_silent_device(s: &Incident, m: &Incident) -> bool {
    if s.place.node.is_none() || s.place.node != m.place.node {
        return false;
    }
    let gap = |x: &Incident| x.kind == IncidentKind::ReportLoss && !is_node_silence(x);
    let silence = |x: &Incident| is_node_silence(x) || is_hidden_node(x);
    if silence(s) {
        return silence(m);
    }
    let reaches_back =
        s.start_ns >= m.start_ns && s.start_ns.saturating_sub(s.start_uncertainty_ns) <= m.start_ns;
    let largest_gap = s.peak.map_or(0, |p| p.value);
    gap(s)
        && reaches_back
        && (is_node_silence(m) || (is_hidden_node(m) && largest_gap >= m.counts.flows.max(1)))
}

/// Among the rank-0 symptoms of one device or cable, what explains the others best: a cable
/// that silently drops (what its ends saw is its loss), then the sequence gap (the reports were
/// sent and lost), then hops without INT (packets crossed it one TTL lower), then a silence
/// alone.
fn device_weight(m: &Incident) -> u8 {
    match m.kind {
        IncidentKind::Drop if is_silent(m) => 3,
        IncidentKind::ReportLoss if !is_node_silence(m) => 2,
        IncidentKind::NonIntHops => 1,
        _ => 0,
    }
}

/// Returns to a link or node (rule 2).
fn is_repair(s: &Incident) -> bool {
    s.kind == IncidentKind::PathChange
        && s.cause.as_deref().is_some_and(|c| c.ends_with("-restored"))
}

/// A link or node the flows left (a path change `link` or `node`), open until they return.
fn is_outage(s: &Incident) -> bool {
    s.kind == IncidentKind::PathChange && matches!(s.cause.as_deref(), Some("link" | "node"))
}

/// Whether `s` may be drops at a failed link's ends or a failed node, before the flows' move
/// names the failure ([`converging`]): a drop at a node, not a loop's.
fn may_converge(s: &Incident) -> bool {
    s.kind == IncidentKind::Drop && rank_of(s) != LOOP_RANK && s.place.node.is_some()
}

/// Whether `a` and `b` are a failed link (or node) and the drops at its ends while routes
/// converge (rule 2): packets queued for the dead port, a route withdrawn before its
/// replacement is in, a queue that takes a link's traffic at once. The drops start within
/// `merge_ns` of the failure either way (a drop report comes at once, the flows' move once
/// the correlation has seen them); a loop's TTL expiries are the loop's (rule 3).
fn converging(a: &Incident, b: &Incident, merge_ns: u64) -> bool {
    let (drop, outage) = match (is_outage(a), is_outage(b)) {
        (false, true) => (a, b),
        (true, false) => (b, a),
        _ => return false,
    };
    may_converge(drop)
        && [outage.place.node, outage.place.peer_node].contains(&drop.place.node)
        && drop.start_ns.abs_diff(outage.start_ns) <= merge_ns
}

/// Drop reasons of a frame too big for its link: the spec's, and a Linux veth's (it frees a
/// larger frame than its peer takes without a reason).
const TOO_BIG_DROPS: [&str; 2] = ["mtu-check-fail", "kernel-unspecified"];

/// A drop of frames too big for their link ([`TOO_BIG_DROPS`]).
fn is_too_big_drop(x: &Incident) -> bool {
    x.kind == IncidentKind::Drop
        && x.cause
            .as_deref()
            .is_some_and(|c| TOO_BIG_DROPS.contains(&c))
}

/// Whether `a` and `b` are a small MTU and drops of frames too big at its node or on a port
/// that leads to it (rule 2).
fn too_big(a: &Incident, b: &Incident) -> bool {
    let (drop, mtu) = match (a.kind, b.kind) {
        (IncidentKind::Drop, IncidentKind::Mtu) => (a, b),
        (IncidentKind::Mtu, IncidentKind::Drop) => (b, a),
        _ => return false,
    };
    is_too_big_drop(drop)
        && mtu.place.node.is_some()
        && (drop.place.node == mtu.place.node || drop.place.peer_node == mtu.place.node)
}

/// Whether `a` and `b` are drops of frames too big at one node's links (rule 2, for INT-XD,
/// where no MTU incident names the node): at one node's ports, at ports leading to the same
/// node, or one at the node the other's port leads to, starting within `merge_ns` of each
/// other.
fn too_big_at_one_node(a: &Incident, b: &Incident, merge_ns: u64) -> bool {
    let towards = |x: &Incident, y: &Incident| {
        x.place.peer_node.is_some()
            && (x.place.peer_node == y.place.peer_node || x.place.peer_node == y.place.node)
    };
    is_too_big_drop(a)
        && is_too_big_drop(b)
        && (a.place.node == b.place.node || towards(a, b) || towards(b, a))
        && a.start_ns.abs_diff(b.start_ns) <= merge_ns
}

/// Whether `a` and `b` are a silently dropping link and what else its loss looks like at one of
/// its ends (rule 2): a neighbour the end could not resolve (the cable eats the address
/// resolution too) or hops without INT named at the end's node (the packets it would have
/// reported vanish into the cable).
fn seen_on_cable(a: &Incident, b: &Incident) -> bool {
    let (other, cable) = match (is_silent(a), is_silent(b)) {
        (false, true) => (a, b),
        (true, false) => (b, a),
        _ => return false,
    };
    let ends = [
        (cable.place.node, cable.place.port),
        (cable.place.peer_node, cable.place.peer_port),
    ];
    let at_end = |port_too: bool| {
        other.place.node.is_some()
            && ends.iter().any(|&(node, port)| {
                node == other.place.node && (!port_too || port == other.place.port)
            })
    };
    match other.kind {
        IncidentKind::Drop => other.cause.as_deref() == Some("next-id-miss") && at_end(true),
        IncidentKind::NonIntHops => is_hidden_node(other) && at_end(false),
        _ => false,
    }
}

/// The first rule (1–4) by which `s` (of rank `r`, its flows going to `dsts`) joins `g`.
fn joins(s: &Incident, r: u8, dsts: &HashSet<Ipv6Addr>, g: &Group, merge_ns: u64) -> Option<u8> {
    // A queue at a port where the incident queues, or where packets loop out (TTL expiries
    // at that port: the loop's traffic fills its queue).
    if at_port(s)
        && g.members.iter().any(|m| {
            (at_port(m) || rank_of(m) == LOOP_RANK)
                && m.place.node == s.place.node
                && m.place.port == s.place.port
        })
    {
        return Some(1);
    }
    if is_repair(s) {
        let left = s.cause.as_deref().and_then(|c| c.strip_suffix("-restored"));
        // The same link either way round: flows of both directions return to it, and the
        // first to be correlated names it from its side.
        let same_place = |p: &IncidentPlace| {
            let ends = (p.node, p.port, p.peer_node, p.peer_port);
            let q = &s.place;
            ends == (q.node, q.port, q.peer_node, q.peer_port)
                || ends == (q.peer_node, q.peer_port, q.node, q.port)
        };
        return g
            .members
            .iter()
            .any(|m| {
                m.kind == IncidentKind::PathChange
                    && m.cause.as_deref() == left
                    && same_place(&m.place)
            })
            .then_some(2);
    }
    if g.members.iter().any(|m| seen_on_cable(s, m)) {
        // Rule 2: a bad cable, and the neighbours and hops its loss hid at its ends.
        return Some(2);
    }
    if is_silent(s) {
        // Rule 2: the other direction of the same cable.
        return g
            .members
            .iter()
            .any(|m| {
                is_silent(m)
                    && m.place.node == s.place.peer_node
                    && m.place.peer_node == s.place.node
            })
            .then_some(2);
    }
    if g.members.iter().any(|m| one_silent_device(s, m)) {
        // Rule 2: a node whose reports stopped, with what it was taken for meanwhile.
        return Some(2);
    }
    if g.members.iter().any(|m| converging(s, m, merge_ns)) {
        // Rule 2: a failed link or node, and the drops at its ends as routes converge.
        return Some(2);
    }
    if g.members
        .iter()
        .any(|m| too_big(s, m) || too_big_at_one_node(s, m, merge_ns))
    {
        // Rule 2: a small MTU, and the frames too big dropped at its links' ends.
        return Some(2);
    }
    if s.kind == IncidentKind::NonIntHops {
        // Rule 2: hops without INT found at once behind several ports are the device that
        // stopped adding INT (or was added without it) that they all cross.
        return g
            .members
            .iter()
            .any(|m| m.kind == IncidentKind::NonIntHops)
            .then_some(2);
    }
    if s.kind == IncidentKind::ReportLoss {
        return None;
    }
    let root = rank_of(&g.inc);
    // Culprits converge on where they go: the senders of an incast on its host, a loop's
    // flows on the prefix that loops; flows seen at one place may not yet be seen at the
    // other, their destinations are.
    let mostly_shared = || {
        let theirs: HashSet<Ipv6Addr> = g
            .members
            .iter()
            .flat_map(|m| m.flows.iter().map(|f| f.flow.dst))
            .collect();
        let shared = dsts.iter().filter(|d| theirs.contains(d)).count();
        shared > 0 && 2 * shared >= dsts.len().min(theirs.len())
    };
    if (root >= LOOP_RANK && r >= 1) || (r >= LOOP_RANK && root >= 1) {
        return mostly_shared().then_some(3);
    }
    // Queues behind a queue (or behind a loop, whose traffic holds up what shares its links).
    let queue = |x: u8| x == QUEUE_RANK || x == 2;
    if ((root == QUEUE_RANK || root >= LOOP_RANK) && queue(r)) || (r == QUEUE_RANK && queue(root)) {
        return mostly_shared().then_some(4);
    }
    None
}

/// The incident `gid` of `members`: the root's, under the group's ID, spanning every member,
/// with the others as symptoms.
fn publish(gid: u64, members: &[Incident]) -> Incident {
    let root = members
        .iter()
        .max_by(|a, b| {
            // A failed link or node is the cause of what joined it (its repair, the drops at
            // its ends); among other ungrouped kinds the first is the root.
            let weight = |m: &Incident| {
                let r = rank_of(m);
                (
                    is_outage(m),
                    r,
                    device_weight(m),
                    (r > 0).then_some(m.counts.flows),
                )
            };
            weight(a)
                .cmp(&weight(b))
                .then(b.start_ns.cmp(&a.start_ns))
                .then(b.id.cmp(&a.id))
        })
        .unwrap_or(&members[0]);
    let mut inc = root.clone();
    inc.id = gid;
    if members.len() == 1 {
        return inc;
    }
    let first = members.iter().min_by_key(|m| m.start_ns).unwrap_or(root);
    // Starts with its first symptom, and may have started as early as any says it did (a
    // sequence gap found late knows the reports went missing since its last in order).
    inc.start_ns = first.start_ns;
    let earliest = members
        .iter()
        .map(|m| m.start_ns.saturating_sub(m.start_uncertainty_ns))
        .min()
        .unwrap_or(first.start_ns);
    inc.start_uncertainty_ns = first.start_ns.saturating_sub(earliest);
    inc.received_ns = members.iter().filter_map(|m| m.received_ns).min();
    inc.last_update_ns = members.iter().map(|m| m.last_update_ns).max().unwrap_or(0);
    // Over when the root is, and no other symptom showed anything after the root ended:
    // tail drops and latency at a port end with its congestion even though, without a
    // sample that says "normal", their own ends wait for their quiet time.
    let root_end = (root.state == IncidentState::Resolved).then_some(root.end_ns.unwrap_or(0));
    let over = root_end.is_some_and(|end| {
        members
            .iter()
            .all(|m| m.state == IncidentState::Resolved || m.last_update_ns <= end)
    });
    if over {
        let last = members
            .iter()
            .max_by_key(|m| m.end_ns.unwrap_or(m.last_update_ns))
            .unwrap_or(root);
        inc.state = IncidentState::Resolved;
        inc.end_ns = Some(
            last.end_ns
                .unwrap_or(last.last_update_ns)
                .max(inc.last_update_ns),
        );
        inc.end_uncertainty_ns = last.end_uncertainty_ns;
        inc.end_reason = last.end_reason.or(root.end_reason);
    } else {
        inc.state = IncidentState::Ongoing;
        inc.end_ns = None;
        inc.end_uncertainty_ns = 0;
        inc.end_reason = None;
    }
    // Each symptom that joined is an update.
    inc.updates = members.iter().map(|m| m.updates).sum::<u64>() + members.len() as u64 - 1;
    inc.severity = members
        .iter()
        .map(|m| m.severity)
        .max()
        .unwrap_or(inc.severity);
    let others = || members.iter().filter(|m| m.id != root.id);
    for m in others() {
        inc.counts.samples += m.counts.samples;
        inc.counts.reports += m.counts.reports;
        inc.counts.reports_lost += m.counts.reports_lost;
        if let Some(p) = m.counts.packets_dropped {
            *inc.counts.packets_dropped.get_or_insert(0) += p;
        }
    }
    let mut listed: HashSet<u64> = inc.flows.iter().map(|f| f.flow_id).collect();
    for f in others().flat_map(|m| m.flows.iter()) {
        if listed.insert(f.flow_id) && inc.flows.len() < MAX_INCIDENT_FLOWS {
            inc.flows.push(*f);
        }
    }
    inc.counts.flows = members
        .iter()
        .map(|m| m.counts.flows)
        .max()
        .unwrap_or(0)
        .max(listed.len() as u64);
    let mut symptoms: Vec<&Incident> = others().collect();
    symptoms.sort_by_key(|m| (m.start_ns, m.id));
    inc.symptoms = symptoms.into_iter().map(Symptom::of).collect();
    inc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::{IncidentCounts, IncidentFlow, Severity};
    use intscope_wire::locate::FlowKey;

    const MS: u64 = 1_000_000;

    fn flow(id: u64, dst: &str) -> IncidentFlow {
        IncidentFlow {
            flow: FlowKey {
                src: "::ffff:10.0.9.9".parse().unwrap(),
                dst: format!("::ffff:{dst}").parse().unwrap(),
                proto: 6,
                src_port: id as u16,
                dst_port: 80,
            },
            flow_id: id,
            share: None,
            samples: 1,
        }
    }

    /// The engine's symptom `id`: `kind` (`cause`) at (node, port) from `at_ms`, its flows
    /// going to `dsts`.
    fn symptom(
        id: u64,
        kind: IncidentKind,
        cause: Option<&str>,
        (node, port): (u32, u32),
        at_ms: u64,
        dsts: &[&str],
    ) -> Incident {
        Incident {
            id,
            kind,
            place: IncidentPlace {
                node: Some(node),
                port: Some(port),
                ..IncidentPlace::default()
            },
            cause: cause.map(str::to_string),
            state: IncidentState::Ongoing,
            severity: Severity::Warning,
            start_ns: at_ms * MS,
            start_uncertainty_ns: 0,
            last_update_ns: at_ms * MS,
            end_ns: None,
            end_uncertainty_ns: 0,
            end_reason: None,
            received_ns: Some(at_ms * MS),
            updates: 0,
            counts: IncidentCounts {
                flows: dsts.len() as u64,
                episodes: 1,
                ..IncidentCounts::default()
            },
            peak: None,
            threshold: None,
            baseline: None,
            flows: dsts
                .iter()
                .enumerate()
                .map(|(i, d)| flow(id * 100 + i as u64, d))
                .collect(),
            symptoms: Vec::new(),
            evidence: None,
        }
    }

    fn causes() -> Causes {
        Causes::new(1_000 * MS, 100 * MS, 1_000 * MS, 1024)
    }

    /// Each incident's kind, node, cause and number of symptoms besides its root.
    fn summary(v: &[Incident]) -> Vec<(IncidentKind, Option<u32>, Option<String>, usize)> {
        v.iter()
            .map(|i| (i.kind, i.place.node, i.cause.clone(), i.symptoms.len()))
            .collect()
    }

    fn all(c: &Causes) -> Vec<Incident> {
        let mut v: Vec<Incident> = c.iter().cloned().collect();
        v.sort_by_key(|i| i.id);
        v
    }

    /// A slow port: its latency shows first, then its queue, then tail drops: one congestion
    /// incident, published once the grouping window passed, with the other two as symptoms.
    #[test]
    fn a_ports_latency_queue_and_tail_drops_are_one_congestion_incident() {
        use IncidentKind::*;
        let mut c = causes();
        c.update(&symptom(1, Latency, None, (2, 1), 0, &["10.0.2.1"]));
        c.update(&symptom(2, Congestion, None, (2, 1), 6, &["10.0.2.1"]));
        c.update(&symptom(
            3,
            Drop,
            Some("traffic-manager"),
            (2, 1),
            14,
            &["10.0.2.1"],
        ));
        c.publish_due(50 * MS);
        assert!(all(&c).is_empty(), "still gathering");
        assert_eq!(c.pending(), 1);
        c.publish_due(100 * MS);
        let v = all(&c);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!((v[0].id, v[0].kind), (1, Congestion));
        assert_eq!(v[0].start_ns, 0, "the first symptom's start");
        let kinds: Vec<IncidentKind> = v[0].symptoms.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, [Latency, Drop]);
        assert_eq!(c.take_changed().len(), 1);
        assert_eq!(c.ongoing(Congestion), 1);
        assert_eq!(c.started[kind_index(Congestion)], 1);
    }

    /// Drops of a reason that is a fault in itself (a routing miss) stay their own incident,
    /// at the same port as a congestion; published IDs count up without gaps.
    #[test]
    fn a_routing_miss_beside_a_queue_is_its_own_incident() {
        use IncidentKind::*;
        let mut c = causes();
        c.update(&symptom(1, Congestion, None, (4, 0), 0, &["10.0.1.1"]));
        c.update(&symptom(
            2,
            Drop,
            Some("routing-miss"),
            (4, 0),
            1,
            &["10.0.1.1"],
        ));
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(
            v.iter().map(|i| (i.id, i.kind)).collect::<Vec<_>>(),
            [(1, Congestion), (2, Drop)]
        );
    }

    /// A loop: TTL expiries at the spine, the looping traffic's latency at the leaf's uplink
    /// (its flows named only after its first evidence, while the incident gathers), and an
    /// unrelated latency elsewhere: two incidents, the loop rooted at the TTL drops.
    #[test]
    fn a_loops_symptoms_join_by_where_their_flows_go() {
        use IncidentKind::*;
        let mut c = causes();
        c.update(&symptom(
            1,
            Drop,
            Some("ip-ttl-zero"),
            (101, 2),
            20,
            &["10.0.3.1", "10.0.3.2"],
        ));
        // Not yet naming a flow.
        c.update(&symptom(2, Latency, None, (2, 5), 21, &[]));
        c.update(&symptom(2, Latency, None, (2, 5), 22, &["10.0.3.2"]));
        c.update(&symptom(3, Latency, None, (9, 9), 23, &["10.0.7.7"]));
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(v.len(), 2, "{v:#?}");
        assert_eq!(
            (v[0].kind, v[0].cause.as_deref()),
            (Drop, Some("ip-ttl-zero"))
        );
        assert_eq!(v[0].symptoms.len(), 1);
        assert_eq!(v[0].symptoms[0].place.node, Some(2));
        assert_eq!((v[1].kind, v[1].place.node), (Latency, Some(9)));
    }

    /// A loop's traffic fills the queue of the port it loops out of, and holds up the traffic
    /// to the hosts behind it: both are the loop's, though their flows go elsewhere.
    #[test]
    fn queues_a_loop_fills_are_the_loops() {
        use IncidentKind::*;
        let mut c = causes();
        c.update(&symptom(1, HopLimit, None, (102, 3), 40, &["10.0.1.1"]));
        c.update(&symptom(
            2,
            Drop,
            Some("ip-ttl-zero"),
            (102, 3),
            40,
            &["10.0.1.1"],
        ));
        c.update(&symptom(3, Microburst, None, (102, 3), 40, &["10.0.3.3"]));
        c.update(&symptom(4, Microburst, None, (3, 3), 41, &["10.0.3.3"]));
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!(v[0].kind, HopLimit);
        assert_eq!(v[0].symptoms.len(), 3);
    }

    /// An incast: the spine's queue towards the host's leaf shows first with the senders that
    /// cross it; the host port's queue, with every sender, becomes the root.
    #[test]
    fn an_incasts_queues_on_the_way_join_the_bottleneck() {
        use IncidentKind::*;
        let mut c = causes();
        c.update(&symptom(1, Microburst, None, (102, 3), 40, &["10.0.3.1"]));
        let mut host = symptom(2, Microburst, None, (3, 1), 40, &["10.0.3.1"]);
        host.counts.flows = 12;
        c.update(&host);
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!((v[0].place.node, v[0].place.port), (Some(3), Some(1)));
        assert_eq!(v[0].symptoms[0].place.node, Some(102));
    }

    /// The spine's queue and its latency gather first, before any names a flow; once the
    /// spine's queue names the incast's host, the two join the host port's incident.
    #[test]
    fn a_gathering_of_several_symptoms_moves_whole() {
        use IncidentKind::*;
        let mut c = causes();
        c.update(&symptom(
            1,
            Microburst,
            None,
            (3, 1),
            40,
            &["10.0.3.1", "10.0.3.1"],
        ));
        c.update(&symptom(2, Microburst, None, (102, 3), 40, &[]));
        c.update(&symptom(3, Latency, None, (102, 3), 40, &[]));
        c.update(&symptom(2, Microburst, None, (102, 3), 41, &["10.0.3.1"]));
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!((v[0].id, v[0].place.node), (1, Some(3)));
        assert_eq!(v[0].symptoms.len(), 2);
    }

    /// A cable that loses packets both ways is one incident; a resolved incident takes no
    /// symptom that starts past the merge window, and ends when its last symptom does.
    #[test]
    fn a_cables_two_directions_are_one_incident_and_old_ones_take_none() {
        use IncidentKind::*;
        let mut c = causes();
        let mut up = symptom(1, Drop, Some("silent"), (1, 5), 0, &["10.0.2.1"]);
        up.place.peer_node = Some(101);
        let mut down = symptom(2, Drop, Some("silent"), (101, 1), 1, &["10.0.1.1"]);
        down.place.peer_node = Some(1);
        c.update(&up);
        c.update(&down);
        c.publish_due(u64::MAX);
        assert_eq!(all(&c).len(), 1);
        for mut s in [up, down] {
            s.state = IncidentState::Resolved;
            s.end_ns = Some(10 * MS);
            s.end_reason = Some(crate::incident::EndReason::Quiet);
            c.update(&s);
        }
        let v = all(&c);
        assert_eq!(v[0].state, IncidentState::Resolved);
        assert_eq!(v[0].end_ns, Some(10 * MS));
        assert_eq!(c.resolved(Drop), 1);
        let mut late = symptom(3, Drop, Some("silent"), (101, 1), 2_000, &["10.0.1.1"]);
        late.place.peer_node = Some(1);
        c.update(&late);
        c.publish_due(u64::MAX);
        assert_eq!(all(&c).len(), 2, "past the merge window: a new fault");
    }

    /// A cable that eats every packet eats the address resolution too: the neighbour its end
    /// could not resolve (reported before the silent drop is found, which dates back to the
    /// loss's start) is the cable's; one on another port is a fault of its own.
    #[test]
    fn a_neighbour_a_bad_cable_left_unresolved_is_the_cable() {
        use IncidentKind::*;
        let mut c = causes();
        let dsts = ["10.0.4.1"];
        c.update(&symptom(
            1,
            Drop,
            Some("next-id-miss"),
            (102, 6),
            1_000,
            &dsts,
        ));
        c.update(&symptom(
            2,
            Drop,
            Some("next-id-miss"),
            (102, 5),
            1_010,
            &dsts,
        ));
        let mut cable = symptom(3, Drop, Some("silent"), (102, 6), 0, &dsts);
        cable.place.peer_node = Some(4);
        cable.place.peer_port = Some(8);
        cable.received_ns = Some(1_050 * MS);
        c.update(&cable);
        let mut other_end = symptom(4, Drop, Some("next-id-miss"), (4, 8), 1_100, &dsts);
        other_end.received_ns = Some(1_100 * MS);
        c.update(&other_end);
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(
            summary(&v),
            [
                (Drop, Some(102), Some("silent".into()), 2),
                (Drop, Some(102), Some("next-id-miss".into()), 0),
            ],
            "{v:#?}"
        );
    }

    /// Hops without INT named at a silently dropping cable's end are the packets the cable ate:
    /// the cable's incident, the cable its root; ones at another node found before are not.
    #[test]
    fn hops_without_int_at_a_bad_cables_end_are_the_cable() {
        use IncidentKind::*;
        let mut c = causes();
        let dsts = ["10.0.4.1"];
        let mut cable = symptom(1, Drop, Some("silent"), (102, 6), 0, &dsts);
        cable.place.peer_node = Some(4);
        cable.place.peer_port = Some(8);
        c.update(&cable);
        let mut elsewhere = symptom(3, NonIntHops, None, (101, 0), 40, &["10.0.9.9"]);
        elsewhere.place.port = None;
        c.update(&elsewhere);
        let mut hidden = symptom(2, NonIntHops, None, (102, 0), 50, &dsts);
        hidden.place.port = None;
        c.update(&hidden);
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(
            summary(&v),
            [
                (Drop, Some(102), Some("silent".into()), 1),
                (NonIntHops, Some(101), None, 0),
            ],
            "{v:#?}"
        );
    }

    /// In INT-XD no MTU incident names the spine: the frames too big its MTU dropped at two
    /// leaves' ports to it at once are one incident, those at its own ports as it was raised
    /// back (seconds later) another; one a minute later is a third.
    #[test]
    fn frames_too_big_at_ports_to_one_node_are_one_incident() {
        use IncidentKind::*;
        let mut c = causes();
        let dsts = ["10.0.2.2"];
        for (id, leaf, at) in [(1, 3, 0), (2, 4, 2), (3, 1, 60_000)] {
            let mut d = symptom(id, Drop, Some("kernel-unspecified"), (leaf, 8), at, &dsts);
            d.place.peer_node = Some(102);
            c.update(&d);
        }
        // Raised back, the spine's ports drop what its leaves' ends do not yet take.
        for (id, leaf, at) in [(4, 2, 4_000), (5, 3, 4_003)] {
            let mut d = symptom(
                id,
                Drop,
                Some("kernel-unspecified"),
                (102, leaf + 2),
                at,
                &dsts,
            );
            d.place.peer_node = Some(leaf);
            c.update(&d);
        }
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(
            summary(&v),
            [
                (Drop, Some(3), Some("kernel-unspecified".into()), 1),
                (Drop, Some(102), Some("kernel-unspecified".into()), 1),
                (Drop, Some(1), Some("kernel-unspecified".into()), 0),
            ],
            "{v:#?}"
        );
    }

    /// A spine's small MTU: the frames too big dropped as its links' ends change one after the
    /// other (a leaf's port to the spine, reported before the MTU incident; the spine's own
    /// port) are its symptoms, the MTU its root; a too-big drop on a port to another node and
    /// a routing miss at the spine are faults of their own.
    #[test]
    fn frames_too_big_at_a_small_mtus_links_are_the_mtu() {
        use IncidentKind::*;
        let mut c = causes();
        let dsts = ["10.0.2.2"];
        let mut at_leaf = symptom(1, Drop, Some("kernel-unspecified"), (1, 8), 0, &dsts);
        at_leaf.place.peer_node = Some(102);
        c.update(&at_leaf);
        let mut mtu = symptom(2, Mtu, None, (102, 0), 7, &dsts);
        mtu.place.port = None;
        c.update(&mtu);
        c.update(&symptom(
            3,
            Drop,
            Some("mtu-check-fail"),
            (102, 4),
            4_000,
            &dsts,
        ));
        let mut elsewhere = symptom(4, Drop, Some("kernel-unspecified"), (2, 7), 10, &dsts);
        elsewhere.place.peer_node = Some(101);
        c.update(&elsewhere);
        c.update(&symptom(5, Drop, Some("routing-miss"), (102, 0), 20, &dsts));
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(
            summary(&v),
            [
                (Mtu, Some(102), None, 2),
                (Drop, Some(2), Some("kernel-unspecified".into()), 0),
                (Drop, Some(102), Some("routing-miss".into()), 0),
            ],
            "{v:#?}"
        );
        assert_eq!(v[0].start_ns, 0, "from the first drop");
    }

    /// A link's repair named from its other end (the direction whose flows the correlation
    /// saw first) is still its repair: one incident.
    #[test]
    fn a_repair_named_from_the_links_other_end_is_its_repair() {
        use IncidentKind::*;
        let mut c = causes();
        let dsts = ["10.0.1.2"];
        let mut down = symptom(1, PathChange, Some("link"), (1, 7), 0, &dsts);
        down.place.peer_node = Some(101);
        down.place.peer_port = Some(3);
        c.update(&down);
        let mut back = symptom(2, PathChange, Some("link-restored"), (101, 3), 4_000, &dsts);
        back.place.peer_node = Some(1);
        back.place.peer_port = Some(7);
        c.update(&back);
        let mut other = symptom(3, PathChange, Some("link-restored"), (101, 4), 4_000, &dsts);
        other.place.peer_node = Some(2);
        other.place.peer_port = Some(7);
        c.update(&other);
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(
            summary(&v),
            [
                (PathChange, Some(1), Some("link".into()), 1),
                (PathChange, Some(101), Some("link-restored".into()), 0),
            ],
            "{v:#?}"
        );
    }

    /// A link that fails: the drops at its two ends as routes converge (reported before the
    /// flows' move is correlated, each end's then gathering on its own, and after) are its
    /// symptoms, the link its root; a routing
    /// miss elsewhere, and one at an end long after the failure, are faults of their own.
    #[test]
    fn drops_at_a_failed_links_ends_are_the_link_down() {
        use IncidentKind::*;
        let mut c = causes();
        let dsts = ["10.0.1.1"];
        c.update(&symptom(1, Drop, Some("routing-miss"), (1, 0), 0, &dsts));
        // The other end's drops, reported before the move too: a gathering of their own.
        c.update(&symptom(
            7,
            Drop,
            Some("routing-miss"),
            (101, 0),
            100,
            &dsts,
        ));
        let mut down = symptom(2, PathChange, Some("link"), (101, 1), 200, &dsts);
        down.place.peer_node = Some(1);
        c.update(&down);
        c.update(&symptom(
            3,
            Drop,
            Some("kernel-device"),
            (101, 1),
            250,
            &dsts,
        ));
        c.update(&symptom(4, Drop, Some("routing-miss"), (2, 0), 220, &dsts));
        c.update(&symptom(
            5,
            Drop,
            Some("routing-miss"),
            (1, 0),
            3_000,
            &dsts,
        ));
        c.update(&symptom(6, Drop, Some("ip-ttl-zero"), (101, 1), 260, &dsts));
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(
            summary(&v),
            [
                (PathChange, Some(101), Some("link".into()), 3),
                (Drop, Some(2), Some("routing-miss".into()), 0),
                (Drop, Some(101), Some("ip-ttl-zero".into()), 0),
                (Drop, Some(1), Some("routing-miss".into()), 0),
            ],
            "{v:#?}"
        );
        assert_eq!(v[0].start_ns, 0, "from the first drop");
    }

    /// A link down as the collector sees it: the far end's drops are reported at once, the
    /// flows' move is named by the path correlation over a second later. The drops wait for
    /// it, unpublished, and become the link down's symptom; a drop the correlation names no
    /// failure for is published once its wait is over.
    #[test]
    fn drops_wait_for_the_correlation_to_name_a_failed_link() {
        use IncidentKind::*;
        let mut c = causes();
        let dsts = ["10.0.1.1"];
        c.update(&symptom(1, Drop, Some("routing-miss"), (1, 0), 0, &dsts));
        c.update(&symptom(2, Drop, Some("routing-miss"), (7, 0), 10, &dsts));
        c.publish_due(1_500 * MS);
        assert!(
            all(&c).is_empty(),
            "published before the correlation could name a link"
        );
        // Named 1.7 s after the first drop (switch time 50 ms: the move began there).
        let mut down = symptom(3, PathChange, Some("link"), (101, 1), 50, &dsts);
        down.place.peer_node = Some(1);
        down.received_ns = Some(1_700 * MS);
        c.update(&down);
        c.publish_due(1_900 * MS);
        assert!(all(&c).is_empty(), "the link down gathers its own symptoms");
        c.publish_due(2_200 * MS);
        let v = all(&c);
        assert_eq!(
            summary(&v),
            [
                (PathChange, Some(101), Some("link".into()), 1),
                (Drop, Some(7), Some("routing-miss".into()), 0),
            ],
            "{v:#?}"
        );
    }

    /// A node whose reports stopped: the silence the hop before it found, the hops without
    /// INT named at it meanwhile and the gap its reports came back with are one report-loss
    /// incident at it, the gap its root. A gap that was going on before (report loss in the
    /// network) takes none of them.
    #[test]
    fn a_silent_node_is_one_report_loss_incident_rooted_in_its_gap() {
        use IncidentKind::*;
        let node_level = |mut s: Incident| {
            s.place.port = None;
            s
        };
        let mut c = causes();
        let mut older_gap = node_level(symptom(1, ReportLoss, None, (7, 0), 5, &[]));
        older_gap.peak = Some(crate::incident::Peak {
            value: 2,
            unit: crate::incident::Unit::Reports,
            at_ns: 5 * MS,
        });
        c.update(&older_gap);
        c.update(&node_level(symptom(
            2,
            NonIntHops,
            None,
            (7, 0),
            100,
            &["10.0.1.1"],
        )));
        c.update(&node_level(symptom(
            3,
            ReportLoss,
            Some("silent"),
            (7, 0),
            300,
            &["10.0.2.1"],
        )));
        let mut back = node_level(symptom(4, ReportLoss, None, (8, 0), 400, &[]));
        back.start_uncertainty_ns = 320 * MS;
        back.peak = Some(crate::incident::Peak {
            value: 215,
            unit: crate::incident::Unit::Reports,
            at_ns: 400 * MS,
        });
        c.update(&back);
        c.publish_due(u64::MAX);
        assert_eq!(all(&c).len(), 3, "another node's gap is its own");
        back.id = 5;
        back.place.node = Some(7);
        c.update(&back);
        c.publish_due(u64::MAX);
        let v = all(&c);
        assert_eq!(v.len(), 3, "{v:#?}");
        let outage = v
            .iter()
            .find(|i| i.symptoms.len() == 2)
            .expect("one outage");
        assert_eq!((outage.kind, outage.cause.as_deref()), (ReportLoss, None));
        assert_eq!(outage.place.node, Some(7));
        assert_eq!(outage.start_ns - outage.start_uncertainty_ns, 80 * MS);
        assert!(
            v.iter()
                .any(|i| i.symptoms.is_empty() && i.start_ns == 5 * MS)
        );
    }
}

//! `/api/events`: the live event log, filtered.

use axum::extract::State as AxState;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;

use intscope_core::{Event, EventKind};

use super::context::{ApiError, Q, Shared, array_page, limit, parse_cursor};

/// Query of `/api/events`.
#[derive(Debug, serde::Deserialize)]
pub struct EventQuery {
    /// Only this kind (kebab-case, e.g. `path-change`).
    pub kind: Option<EventKind>,
    /// Only events at this node.
    pub node: Option<u32>,
    /// Only events of this flow ID.
    pub flow: Option<u64>,
    /// Only events with a larger ID (for polling).
    pub after: Option<u64>,
    /// Only events with a smaller ID: the next page back (from the `Link` header).
    pub cursor: Option<String>,
    /// At most this many, newest first (default 200, at most the log's size,
    /// [`intscope_core::EVENT_LOG`]).
    pub limit: Option<usize>,
}

pub(super) async fn events(
    AxState(api): Shared,
    Q(q): Q<EventQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = limit(&api, q.limit, 200, intscope_core::EVENT_LOG)?;
    let before = parse_cursor::<1>(&api, q.cursor.as_deref())?;
    // Only the event log's own lock, held while the page is copied out: never the shard locks
    // ingest writes under, and no serializing under any lock.
    let page: Vec<Event> = {
        let log = api.collector.state.events();
        log.events()
            .iter()
            .rev()
            .filter(|e| selected(e, q.kind, q.node, q.flow))
            .filter(|e| q.after.is_none_or(|a| e.id > a))
            .filter(|e| before.is_none_or(|[b]| e.id < b))
            .take(limit + 1)
            .map(|e| log.linked(e))
            .collect()
    };
    // Keyed by the reverse of the ID: newest first, and the cursor is the last ID sent.
    let rows: Vec<([u64; 1], Event)> = page.into_iter().map(|e| ([u64::MAX - e.id], e)).collect();
    let (mut headers, body) = array_page("/api/events", rows, None, limit);
    // The Link header names the next page by the last ID, not its reverse.
    if let Some(last) = body.0.last().map(|e| e.id)
        && headers.contains_key(header::LINK)
        && let Ok(v) = HeaderValue::from_str(&format!(
            "</api/events?limit={limit}&cursor={last}>; rel=\"next\""
        ))
    {
        headers.insert(header::LINK, v);
    }
    Ok((headers, body))
}

/// Whether `e` passes the kind, node and flow filters of an events query.
pub(super) fn selected(
    e: &Event,
    kind: Option<EventKind>,
    node: Option<u32>,
    flow: Option<u64>,
) -> bool {
    kind.is_none_or(|k| e.kind == k)
        && node.is_none_or(|n| e.node_id == Some(n))
        && flow.is_none_or(|f| e.flow_id == Some(f))
}

//! `/api/flows` and `/api/flows/{id}`: the live flows, a page at a time, and one flow's detail.

use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use axum::response::Json;
use serde::Serialize;

use crate::store::{FlowInterval, HistoryQuery};
use crate::view::FlowSummary;
use intscope_core::Event;

use intscope_core::{FlowSearch, FlowView};

use super::context::{
    ApiError, MAX_FLOWS_LIMIT, MAX_FLOWS_OFFSET, Q, Shared, limit, parse_cursor, store_query,
    with_snapshot,
};

/// Query of `/api/flows`.
#[derive(Debug, serde::Deserialize)]
pub struct FlowQuery {
    /// Page size (default 100, at most [`MAX_FLOWS_LIMIT`]).
    pub limit: Option<usize>,
    /// Rows to skip (at most [`MAX_FLOWS_OFFSET`]).
    pub offset: Option<usize>,
    /// Continue after the last flow of a previous page (its `next`).
    pub cursor: Option<String>,
    /// `last_seen` (default), `reports`, `drops`, `p99`, `path_changes`, `first_seen`.
    pub sort: Option<String>,
    /// Substring of the flow's addresses or ports.
    pub q: Option<String>,
    /// Only flows whose path crosses this node.
    pub node: Option<u32>,
}

/// A page of `/api/flows`.
#[derive(Debug, Serialize)]
pub struct FlowPage {
    /// Flows matching the filters (all pages).
    pub total: usize,
    /// This page.
    pub flows: Vec<FlowSummary>,
    /// Cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

/// A path and when it was first seen.
#[derive(Debug, Serialize)]
pub struct PathSince {
    /// When it was first seen, ns.
    pub since_ns: u64,
    /// The path, source first.
    pub path: intscope_core::Path,
}

/// One flow of `/api/flows/{id}`.
#[derive(Debug, Serialize)]
pub struct FlowDetail {
    /// What the flow list shows.
    #[serde(flatten)]
    pub summary: FlowSummary,
    /// Recent paths, oldest first, ending with the current one.
    pub path_history: Vec<PathSince>,
    /// The last latency sample (a list of at most one).
    pub series: intscope_core::LastSample,
    /// The flow's events in the in-memory log.
    pub events: Vec<Event>,
    /// With a store: the flow's series per store interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<FlowInterval>>,
}

pub(super) async fn flows(
    AxState(api): Shared,
    Q(q): Q<FlowQuery>,
) -> Result<Json<FlowPage>, ApiError> {
    let limit = limit(&api, q.limit, 100, MAX_FLOWS_LIMIT)?;
    let offset = q.offset.unwrap_or(0);
    if offset > MAX_FLOWS_OFFSET {
        return Err(ApiError::bad(
            &api,
            format!(
                "offset {offset} is above the maximum of {MAX_FLOWS_OFFSET}; page with `cursor`"
            ),
        ));
    }
    let sort = q.sort.as_deref().unwrap_or("last_seen");
    // One key per flow, read once in the same pass as the filters (the flows are many),
    // larger first; ties by ID.
    let key: fn(&FlowView) -> u64 = match sort {
        "reports" => |f| f.reports,
        "drops" => |f| f.drops,
        "p99" => |f| f.e2e_p99().unwrap_or(0),
        "path_changes" => |f| u64::from(f.path_changes),
        "first_seen" => |f| u64::MAX - f.first_seen_ns,
        "last_seen" => |f| f.last_seen_ns,
        other => {
            return Err(ApiError::bad(
                &api,
                format!(
                    "sort {other:?}: one of last_seen, reports, drops, p99, path_changes, first_seen"
                ),
            ));
        }
    };
    // A cursor is the sort, the key and the ID of the page's last flow: the next page is the
    // flows after it in the same order.
    let after = match q.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => {
            let (s, rest) = c.split_once('.').unwrap_or(("", c));
            if s != sort {
                return Err(ApiError::bad(
                    &api,
                    format!("cursor {c:?} is not one of sort {sort:?}"),
                ));
            }
            let [k, id] = parse_cursor::<2>(&api, Some(rest))?.unwrap_or_default();
            Some((std::cmp::Reverse(k), id))
        }
    };
    // Built before the state is locked: its tables take a millisecond or two.
    let mut search = q.q.as_deref().map(|t| FlowSearch::new(&t.to_lowercase()));
    with_snapshot(&api.collector, |s| {
        // The page is among the `wanted` first flows: only those are kept, so nothing is
        // collected for the rest of a million; one more tells whether a next page exists.
        let wanted = offset.saturating_add(limit).saturating_add(1);
        let mut total = 0usize;
        let matching = s
            .flows()
            .filter(|f| q.node.is_none_or(|n| f.path.iter().any(|h| h.node_id == n)))
            .filter(|f| search.as_mut().is_none_or(|search| search.matches(&f.key)))
            .inspect(|_| total += 1)
            .filter(|f| after.is_none_or(|a| (std::cmp::Reverse(key(f)), f.id) > a));
        // Larger sort key first; ties by ID.
        let first =
            intscope_core::smallest(matching, wanted, |f| (std::cmp::Reverse(key(f)), f.id));
        let more = first.len() == wanted;
        let page: Vec<FlowView> = first.into_iter().skip(offset).take(limit).collect();
        let next = more
            .then(|| page.last().map(|f| format!("{sort}.{}.{}", key(f), f.id)))
            .flatten();
        Json(FlowPage {
            total,
            flows: page.iter().map(FlowSummary::from).collect(),
            next,
        })
    })
}

pub(super) async fn flow(
    AxState(api): Shared,
    id: Result<Path<u64>, axum::extract::rejection::PathRejection>,
) -> Result<Json<FlowDetail>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad(&api, e.body_text()))?;
    let found = with_snapshot(&api.collector, |s| {
        let f = s.flow_by_id(id)?;
        // Its samples and earlier paths are read from the live flow (one flow under its
        // shard's lock): published rows leave them out to stay small. A flow that left since the
        // snapshot is gone.
        let recent = api.collector.state.flow_recent(&f.key, id)?;
        Some({
            // The event log has its own lock, which the shards take only to append.
            let log = api.collector.state.events();
            let events: Vec<Event> = log
                .events()
                .iter()
                .filter(|e| e.flow_id == Some(id))
                .map(|e| log.linked(e))
                .collect();
            drop(log);
            FlowDetail {
                summary: FlowSummary::from(&f),
                path_history: recent
                    .paths
                    .into_iter()
                    .map(|(since_ns, path)| PathSince { since_ns, path })
                    .collect(),
                series: recent.samples,
                events,
                intervals: None,
            }
        })
    })?;
    let Some(mut detail) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no flow with id {id}"),
        ));
    };
    // The flow's longer history, per store interval (a disk read, on the blocking pool).
    if api.collector.store.is_some() {
        let key = detail.summary.flow.clone();
        detail.intervals = Some(
            store_query(&api, HistoryQuery::default(), move |s, q| {
                s.flow_series(&key, q)
            })
            .await?,
        );
    }
    Ok(Json(detail))
}

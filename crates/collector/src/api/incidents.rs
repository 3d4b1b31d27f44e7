//! `/api/incidents` and `/api/incidents/{id}`: the incidents, newest first, filtered.

use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use axum::response::Json;
use serde::Serialize;

use intscope_core::Incident;

use super::context::{ApiError, Q, Shared, limit, parse_cursor};

/// Most incidents one page of `/api/incidents` holds (default [`INCIDENTS_DEFAULT`]).
pub const INCIDENTS_MAX: usize = 1000;
/// Incidents a page holds when the query names no `limit`.
pub const INCIDENTS_DEFAULT: usize = 100;

/// Query of `/api/incidents`.
#[derive(Debug, serde::Deserialize)]
pub struct IncidentQuery {
    /// Only `ongoing` or `resolved` ones.
    pub state: Option<intscope_core::IncidentState>,
    /// Only this kind (its label, e.g. `path-change`).
    pub kind: Option<String>,
    /// Only incidents at this node (as the place's node or its peer).
    pub node: Option<u32>,
    /// Only incidents that lasted until this switch time or later (ns).
    pub since: Option<u64>,
    /// Only incidents that started at this switch time or earlier (ns).
    pub until: Option<u64>,
    /// At most this many, newest (highest ID) first: default [`INCIDENTS_DEFAULT`], at most
    /// [`INCIDENTS_MAX`].
    pub limit: Option<usize>,
    /// The `next` of the previous page: only incidents with a smaller ID.
    pub cursor: Option<String>,
}

/// `GET /api/incidents`: `{"incidents": [Incident...], "next": cursor or null}`, newest first.
/// A page of `/api/incidents`.
#[derive(Debug, Serialize)]
pub struct IncidentPage {
    /// Newest (highest ID) first.
    pub incidents: Vec<Incident>,
    /// Cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

pub(super) async fn incidents(
    AxState(api): Shared,
    Q(q): Q<IncidentQuery>,
) -> Result<Json<IncidentPage>, ApiError> {
    use intscope_core::IncidentKind;
    let limit = limit(&api, q.limit, INCIDENTS_DEFAULT, INCIDENTS_MAX)?;
    let before = parse_cursor::<1>(&api, q.cursor.as_deref())?.map(|[b]| b);
    let kind = match q.kind.as_deref() {
        None => None,
        Some(k) => Some(IncidentKind::from_label(k).ok_or_else(|| {
            let known: Vec<_> = IncidentKind::ALL.iter().map(|k| k.label()).collect();
            ApiError::bad(&api, format!("kind {k:?} is none of {}", known.join(", ")))
        })?),
    };
    let mut page = api.collector.with_incidents(|log| {
        let mut page: Vec<&intscope_core::Incident> = log
            .iter()
            .filter(|i| q.state.is_none_or(|s| i.state == s))
            .filter(|i| kind.is_none_or(|k| i.kind == k))
            .filter(|i| {
                q.node
                    .is_none_or(|n| i.place.node == Some(n) || i.place.peer_node == Some(n))
            })
            // An ongoing incident lasts until now: it overlaps every range after its start (an
            // outage sends no evidence, so its last update can be long before the range).
            .filter(|i| q.since.is_none_or(|t| i.end_ns.is_none_or(|end| end >= t)))
            .filter(|i| q.until.is_none_or(|t| i.start_ns <= t))
            .filter(|i| before.is_none_or(|b| i.id < b))
            .collect();
        page.sort_unstable_by_key(|i| std::cmp::Reverse(i.id));
        page.truncate(limit + 1);
        page.into_iter().cloned().collect::<Vec<Incident>>()
    });
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|i| i.id.to_string())
    });
    Ok(Json(IncidentPage {
        incidents: page,
        next: next.flatten(),
    }))
}

/// `GET /api/incidents/{id}`: the incident, or a JSON 404.
pub(super) async fn incident(
    AxState(api): Shared,
    id: Result<Path<u64>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Incident>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad(&api, e.body_text()))?;
    api.collector
        .with_incidents(|log| log.get(id).cloned())
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no incident with id {id} (resolved ones leave after the newest 1024 of their kind)"),
            )
        })
}

//! `/api/history/*`: the store's answers, run on the blocking pool with a deadline.

use axum::extract::State as AxState;
use axum::response::Json;

use crate::store::{HistoryQuery, Page, QueueInterval, StoredEvent, StoredIncident};
use crate::view::FlowSummary;

use super::context::{ApiError, Q, Shared, store_query};

pub(super) async fn history_events(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<StoredEvent>>, ApiError> {
    store_query(&api, q, |s, q| s.events(q)).await.map(Json)
}

pub(super) async fn history_flows(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<FlowSummary>>, ApiError> {
    store_query(&api, q, |s, q| s.flows(q)).await.map(Json)
}

/// Stored incidents, each as its newest version, most recently started first:
/// `?since&until&kind&node&limit&cursor` → `{"incidents": [...], "next"}`.
pub(super) async fn history_incidents(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<StoredIncident>>, ApiError> {
    store_query(&api, q, |s, q| s.incidents(q)).await.map(Json)
}

pub(super) async fn history_queues(
    AxState(api): Shared,
    Q(q): Q<HistoryQuery>,
) -> Result<Json<Page<QueueInterval>>, ApiError> {
    store_query(&api, q, |s, q| s.queue_series(q))
        .await
        .map(Json)
}

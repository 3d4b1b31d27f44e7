//! `/api/events/stream`: events as server-sent events, as they happen.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State as AxState;
use axum::http::StatusCode;
use serde::Serialize;

use intscope_core::EventKind;

use super::context::{ApiError, Q, STREAM_BATCH, Shared};
use super::events::selected;

/// The last message of an event stream whose client fell behind.
#[derive(Debug, Serialize)]
pub struct Lagged {
    /// Events it was not sent.
    pub missed: u64,
    /// The ID to pass as `after` to resume.
    pub resume_after: u64,
}

/// Query of `/api/events/stream`.
#[derive(Debug, serde::Deserialize)]
pub struct StreamQuery {
    /// Only this kind.
    pub kind: Option<EventKind>,
    /// Only events at this node.
    pub node: Option<u32>,
    /// Only events of this flow ID.
    pub flow: Option<u64>,
    /// Start after this event ID (default: only new events).
    pub after: Option<u64>,
}

/// Server-sent events: each new event as `event: <kind>` with the event's JSON as data. The log is
/// polled every 200 ms, so a slow client never holds the state lock, and a client costs one
/// batch of at most [`STREAM_BATCH`] events: the stream moves only as fast as the client reads.
/// A client so slow that events it was not sent left the log gets a last `lagged` event and is
/// dropped (counted); `max_streams` streams at most are open at once.
pub(super) async fn event_stream(
    AxState(api): Shared,
    Q(q): Q<StreamQuery>,
) -> Result<
    axum::response::sse::Sse<
        impl futures_util::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
    >,
    ApiError,
> {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    use futures_util::StreamExt;
    let Ok(slot) = Arc::clone(&api.streams).try_acquire_owned() else {
        api.stats.streams_refused.fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} event streams are open, the most allowed",
                api.cfg.max_streams
            ),
        ));
    };
    let start = q
        .after
        .unwrap_or_else(|| api.collector.state.events().next_id().saturating_sub(1));
    // (api, slot, last ID looked at, first poll, query); `None` once the stream is to end.
    let state = Some((api, slot, start, true, q));
    let stream = futures_util::stream::unfold(state, |state| async move {
        let (api, slot, mut last, mut first, q) = state?;
        loop {
            let from = last;
            let mut lagged = None;
            let batch: Vec<SseEvent> = {
                let log = api.collector.state.events();
                let oldest = log.events().front().map(|e| e.id);
                if !first
                    && let Some(o) = oldest
                    && o > from + 1
                {
                    lagged = Some(o - from - 1);
                }
                log.events()
                    .iter()
                    .filter(|e| e.id > from)
                    .take(STREAM_BATCH)
                    .inspect(|e| last = last.max(e.id))
                    .filter(|e| selected(e, q.kind, q.node, q.flow))
                    .map(|e| {
                        SseEvent::default()
                            .event(e.kind.label())
                            .id(e.id.to_string())
                            .data(serde_json::to_string(&log.linked(e)).unwrap_or_default())
                    })
                    .collect()
            };
            if let Some(missed) = lagged {
                api.stats
                    .streams_dropped_lagged
                    .fetch_add(1, Ordering::Relaxed);
                let bye = SseEvent::default().event("lagged").data(
                    serde_json::to_string(&Lagged {
                        missed,
                        resume_after: last,
                    })
                    .unwrap_or_default(),
                );
                return Some((futures_util::stream::iter(vec![Ok(bye)]), None));
            }
            if !batch.is_empty() {
                return Some((
                    futures_util::stream::iter(batch.into_iter().map(Ok).collect::<Vec<_>>()),
                    Some((api, slot, last, false, q)),
                ));
            }
            first = false;
            if last == from {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    })
    .flatten();
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

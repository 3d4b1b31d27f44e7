//! Every endpoint's served JSON against `docs/collector-api.openapi.yaml`: types, enums, nullable,
//! array items and object properties checked recursively (through `$ref` and `allOf`). An object
//! schema that lists `properties` must match the served keys exactly — every listed property
//! present (null only where `nullable`), none unlisted — unless it names its `required` ones
//! (then the others may be absent) or allows `additionalProperties`. Every array the answers
//! hold must have had items in at least one answer, or its item schema went unchecked.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use intscope_collector::api;
use intscope_collector::hub::Collector;
use intscope_collector::store::HistoryQuery;
use serde_json::Value;
use tower::ServiceExt;

fn spec() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/collector-api.openapi.yaml"
    ))
    .unwrap();
    serde_norway::from_str(&text).expect("the OpenAPI file is YAML")
}

/// The schema `#/components/schemas/X` names.
fn resolve<'a>(spec: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let path = r.strip_prefix("#/").expect("a local $ref");
            let target = path.split('/').fold(spec, |v, k| &v[k]);
            assert!(!target.is_null(), "{r} does not exist");
            resolve(spec, target)
        }
        None => schema,
    }
}

thread_local! {
    /// The answer being checked: its URI, and the route template it stands for in [`ARRAYS`].
    static ANSWER: RefCell<(String, String)> = const { RefCell::new((String::new(), String::new())) };
    /// Each array met (its path, under the route's template): whether it ever held items.
    static ARRAYS: RefCell<BTreeMap<String, bool>> = const { RefCell::new(BTreeMap::new()) };
}

/// Notes that the array at `at` held `n` items.
fn saw_array(at: &str, n: usize) {
    let key = ANSWER.with_borrow(|(uri, template)| match at.strip_prefix(uri.as_str()) {
        Some(rest) if !uri.is_empty() => format!("{template}{rest}"),
        _ => at.to_string(),
    });
    ARRAYS.with_borrow_mut(|a| *a.entry(key).or_default() |= n > 0);
}

/// Checks the answer to `uri` (route `template`) against `schema`.
fn check_answer(
    spec: &Value,
    schema: &Value,
    v: &Value,
    (template, uri): (&str, &str),
    errors: &mut Vec<String>,
) {
    ANSWER.set((uri.to_string(), template.to_string()));
    check(spec, schema, v, uri, errors);
    ANSWER.set((String::new(), String::new()));
}

/// The problems of `v` against `schema`, each with its JSON path.
fn check(spec: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(spec, schema);
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        if v.is_null() && schema["nullable"] == true {
            return;
        }
        // The parts' properties together describe the object.
        let mut merged = serde_json::Map::new();
        // Each part's required properties: those it names, or all it lists.
        let mut required = Vec::new();
        let mut open = false;
        for part in all {
            let part = resolve(spec, part);
            if let Some(p) = part.get("properties").and_then(Value::as_object) {
                merged.extend(p.clone());
                match part.get("required").and_then(Value::as_array) {
                    Some(r) => required.extend(r.iter().cloned()),
                    None => required.extend(p.keys().map(|k| Value::String(k.clone()))),
                }
            } else {
                open = true;
            }
            if part.get("properties").is_none() {
                check(spec, part, v, at, errors);
            }
        }
        if !merged.is_empty() {
            let mut whole =
                serde_json::json!({"type": "object", "properties": merged, "required": required});
            if open {
                whole["additionalProperties"] = Value::Bool(true);
            }
            check(spec, &whole, v, at, errors);
        }
        return;
    }
    if v.is_null() {
        if schema["nullable"] != true {
            errors.push(format!("{at}: null, not nullable"));
        }
        return;
    }
    let ty = schema.get("type").and_then(Value::as_str);
    let ok = match ty {
        Some("integer") => v.is_u64() || v.is_i64(),
        Some("number") => v.is_number(),
        Some("string") => v.is_string(),
        Some("boolean") => v.is_boolean(),
        Some("array") => v.is_array(),
        Some("object") => v.is_object(),
        None => true,
        Some(other) => {
            errors.push(format!("{at}: unknown type {other}"));
            true
        }
    };
    if !ok {
        errors.push(format!("{at}: {v} is not {}", ty.unwrap_or("?")));
        return;
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        errors.push(format!("{at}: {v} is none of {e:?}"));
    }
    if let Value::Array(items) = v {
        saw_array(at, items.len());
        for (k, n) in [("minItems", items.len()), ("maxItems", items.len())] {
            if let Some(b) = schema.get(k).and_then(Value::as_u64) {
                let fine = if k == "minItems" {
                    n as u64 >= b
                } else {
                    n as u64 <= b
                };
                if !fine {
                    errors.push(format!("{at}: {n} items ({k} {b})"));
                }
            }
        }
        if let Some(item) = schema.get("items") {
            for x in items {
                // One report per problem, not per row.
                let mut found = Vec::new();
                check(spec, item, x, &format!("{at}[]"), &mut found);
                for e in found {
                    if !errors.contains(&e) {
                        errors.push(e);
                    }
                }
            }
        }
    }
    if let Value::Object(o) = v {
        let props = schema.get("properties").and_then(Value::as_object);
        let extra = schema.get("additionalProperties");
        if let Some(props) = props {
            let required: Option<Vec<&str>> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect());
            for (k, s) in props {
                match o.get(k) {
                    Some(x) => check(spec, s, x, &format!("{at}.{k}"), errors),
                    None if required.as_ref().is_none_or(|r| r.contains(&k.as_str())) => {
                        errors.push(format!("{at}.{k}: documented, not served"))
                    }
                    None => {}
                }
            }
        }
        for (k, x) in o {
            if props.is_some_and(|p| p.contains_key(k)) {
                continue;
            }
            match extra {
                Some(Value::Bool(true)) => {}
                Some(s @ Value::Object(_)) => check(spec, s, x, &format!("{at}.{k}"), errors),
                _ if props.is_none() => {}
                _ => errors.push(format!("{at}.{k}: served, not documented")),
            }
        }
    }
}

/// The schema of `template`'s answer with `status`.
fn response_schema<'a>(spec: &'a Value, template: &str, status: &str) -> &'a Value {
    let op = &spec["paths"][template]["get"];
    assert!(!op.is_null(), "{template} is not in the OpenAPI file");
    let r = resolve(spec, &op["responses"][status]);
    assert!(!r.is_null(), "{template} documents no {status}");
    &r["content"]["application/json"]["schema"]
}

fn collector(data: &std::path::Path) -> Arc<Collector> {
    let c = common::open_collector(Some(data));
    common::feed_load(&c, common::v2_load(30, 20), 800, 400);
    c
}

/// A template for the cases' table (a test's few strings, kept for its run).
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, String, Vec<u8>) {
    let r = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = r.status();
    let ty = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = axum::body::to_bytes(r.into_body(), 64 << 20).await.unwrap();
    (status, ty, body.to_vec())
}

#[test]
fn every_endpoint_answers_as_documented() {
    let dir = common::tempdir("openapi");
    let c = collector(dir.path());
    let spec = spec();
    let app = api::router(Arc::clone(&c));
    let snap = c.snapshot();
    let flow_id = snap.state.flows().next().expect("a flow").id;
    let incident_id = c
        .state
        .with_incidents(|l| l.iter().next().map(|i| i.id))
        .expect("an incident (the load drops packets)");
    // A stored flow, for the fabric's one-flow view.
    let stored = c
        .store
        .as_ref()
        .unwrap()
        .flows(&HistoryQuery::default())
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("a stored flow")
        .flow;
    let stored_flow = format!(
        "/api/fabric/flow?src={}&dst={}&proto={}&src_port={}&dst_port={}",
        stored.src, stored.dst, stored.proto, stored.src_port, stored.dst_port
    );
    // (template, URI, status): every documented JSON route, and the error answers.
    let cases: Vec<(&str, String, &str)> = vec![
        ("/api/stats", "/api/stats".into(), "200"),
        ("/api/nodes", "/api/nodes".into(), "200"),
        ("/api/names", "/api/names".into(), "200"),
        ("/api/links", "/api/links".into(), "200"),
        ("/api/queues", "/api/queues".into(), "200"),
        ("/api/flows", "/api/flows?limit=5".into(), "200"),
        ("/api/flows/{id}", format!("/api/flows/{flow_id}"), "200"),
        ("/api/flows/{id}", "/api/flows/999999999".into(), "404"),
        ("/api/events", "/api/events".into(), "200"),
        ("/api/incidents", "/api/incidents".into(), "200"),
        (
            "/api/incidents/{id}",
            format!("/api/incidents/{incident_id}"),
            "200",
        ),
        (
            "/api/incidents/{id}",
            "/api/incidents/999999999".into(),
            "404",
        ),
        ("/api/incidents/{id}", "/api/incidents/x".into(), "400"),
        ("/api/history/events", "/api/history/events".into(), "200"),
        ("/api/history/flows", "/api/history/flows".into(), "200"),
        ("/api/history/queues", "/api/history/queues".into(), "200"),
        (
            "/api/history/incidents",
            "/api/history/incidents".into(),
            "200",
        ),
        (
            "/api/history/events",
            "/api/history/events?limit=0".into(),
            "400",
        ),
        ("/api/flows", "/api/flows?sort=nope".into(), "400"),
        ("/api/fabric/stats", "/api/fabric/stats".into(), "200"),
        ("/api/fabric/flow", stored_flow.clone(), "200"),
        (
            "/api/fabric/flow",
            "/api/fabric/flow?src=192.0.2.1&dst=192.0.2.2&proto=17&src_port=1&dst_port=2".into(),
            "404",
        ),
        ("/api/fabric/flow", format!("{stored_flow}&limit=0"), "400"),
    ];
    // The fabric's lists, under both of their paths, and their bad requests.
    let mut cases = cases;
    for list in ["flows", "queues", "events", "incidents"] {
        for prefix in ["/api/fabric", "/api/fabric/history"] {
            let path = format!("{prefix}/{list}");
            cases.push((leak(&path), path.clone(), "200"));
            cases.push((leak(&path), format!("{path}?limit=10001"), "400"));
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut errors = Vec::new();
    let mut nonempty = 0;
    rt.block_on(async {
        for (template, uri, status) in &cases {
            let (got, ty, body) = get(&app, uri).await;
            assert_eq!(
                got.as_str(),
                *status,
                "{uri}: {}",
                String::from_utf8_lossy(&body)
            );
            assert!(ty.starts_with("application/json"), "{uri}: {ty}");
            let v: Value = serde_json::from_slice(&body).unwrap();
            let before = errors.len();
            check_answer(
                &spec,
                response_schema(&spec, template, status),
                &v,
                (template, uri),
                &mut errors,
            );
            // A stored list's page must hold rows too, or its items went unchecked.
            let rows_checked = !uri.starts_with("/api/history/")
                && !uri.starts_with("/api/fabric/")
                || *status != "200"
                || v.as_object().is_some_and(|o| {
                    o.values()
                        .all(|x| x.as_array().is_none_or(|a| !a.is_empty()))
                });
            if errors.len() == before && rows_checked && v.as_array().is_none_or(|a| !a.is_empty())
            {
                nonempty += 1;
            }
        }
        // The event stream's data are Events.
        let r = app
            .clone()
            .oneshot(
                Request::get("/api/events/stream?after=0")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut stream = r.into_body().into_data_stream();
        let chunk = futures_util::StreamExt::next(&mut stream)
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8(chunk.to_vec()).unwrap();
        let data = text
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .unwrap_or_else(|| panic!("no data line in {text}"));
        let event: Value = serde_json::from_str(data.trim()).unwrap();
        let schema = serde_json::json!({"$ref": "#/components/schemas/Event"});
        check_answer(
            &spec,
            &schema,
            &event,
            ("/api/events/stream", "/api/events/stream"),
            &mut errors,
        );
        // Without a store: `store` is null and a flow has no `intervals`.
        let bare = common::open_collector(None);
        common::feed_load(&bare, common::v2_load(30, 20), 800, 0);
        let bare_app = api::router(Arc::clone(&bare));
        let id = bare.snapshot().state.flows().next().unwrap().id;
        for (template, uri) in [
            ("/api/stats", "/api/stats".to_string()),
            ("/api/flows/{id}", format!("/api/flows/{id}")),
        ] {
            let (status, _, body) = get(&bare_app, &uri).await;
            assert_eq!(status, 200, "{uri}");
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert!(
                v.get("intervals").is_none() && v.get("store").is_none_or(Value::is_null),
                "{uri}: {v}"
            );
            check_answer(
                &spec,
                response_schema(&spec, template, "200"),
                &v,
                (template, &uri),
                &mut errors,
            );
        }
    });
    assert!(
        errors.is_empty(),
        "served vs documented:\n{}",
        errors.join("\n")
    );
    assert_eq!(nonempty, cases.len(), "every answer had rows to check");
    let never_filled: Vec<String> = ARRAYS.with_borrow(|a| {
        a.iter()
            .filter(|(_, filled)| !**filled)
            .map(|(at, _)| at.clone())
            .collect()
    });
    assert!(
        never_filled.is_empty(),
        "arrays empty in every answer (their items went unchecked):\n{}",
        never_filled.join("\n")
    );
    // Every documented JSON route was asked.
    for (path, item) in spec["paths"].as_object().unwrap() {
        if item["get"]["responses"]["200"]["content"]["application/json"].is_null() {
            continue;
        }
        assert!(
            cases.iter().any(|(t, _, _)| t == path),
            "{path} documented, not tested"
        );
    }
}

/// The checker finds each kind of mismatch (a checker that passes everything proves nothing).
#[test]
fn the_checker_finds_mismatches() {
    let spec = spec();
    let link = serde_json::json!({"$ref": "#/components/schemas/Link"});
    let good = serde_json::json!({"from_node": 1, "from_port": 2, "to_node": 3, "to_port": 4,
        "reports": 5, "last_seen_ns": 6, "tx_util": null, "utilization": 0.5});
    let mut errors = Vec::new();
    check(&spec, &link, &good, "link", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let bad = |f: &dyn Fn(&mut Value), expect: &str| {
        let mut v = good.clone();
        f(&mut v);
        let mut errors = Vec::new();
        check(&spec, &link, &v, "link", &mut errors);
        assert!(
            errors.iter().any(|e| e.contains(expect)),
            "{expect}: {errors:?}"
        );
    };
    bad(
        &|v| drop(v.as_object_mut().unwrap().remove("reports")),
        "link.reports: documented, not served",
    );
    bad(
        &|v| v["extra"] = 1.into(),
        "link.extra: served, not documented",
    );
    bad(&|v| v["reports"] = "5".into(), "is not integer");
    bad(&|v| v["reports"] = Value::Null, "null, not nullable");
    bad(&|v| v["utilization"] = "x".into(), "is not number");
    let kind = serde_json::json!({"$ref": "#/components/schemas/EventKind"});
    let mut errors = Vec::new();
    check(&spec, &kind, &"no-such-kind".into(), "kind", &mut errors);
    assert_eq!(errors.len(), 1, "{errors:?}");
}

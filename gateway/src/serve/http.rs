//! The gateway's endpoints.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Gateway;
use super::metrics::CONTENT_TYPE as METRICS_TYPE;
use super::proxy;
use crate::openai::{ApiError, Endpoint};

/// `POST /v1/completions`.
pub async fn completions(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    forward(gateway, Endpoint::Completions, headers, body).await
}

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    forward(gateway, Endpoint::Chat, headers, body).await
}

async fn forward(
    gateway: Arc<Gateway>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            gateway.metrics.outcome("client_error");
            return ApiError::from(rejection).into_response();
        }
    };
    match proxy::forward(Arc::clone(&gateway), endpoint, headers, body).await {
        Ok(response) => response,
        Err(error) => {
            if error.status.is_client_error() {
                gateway.metrics.outcome("client_error");
            }
            error.into_response()
        }
    }
}

/// `GET /v1/models`: the healthy workers' models, each id once.
pub async fn models(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    let mut data: Vec<Value> = Vec::new();
    for id in gateway.fleet.healthy() {
        let Some(worker) = gateway.fleet.get(id) else { continue };
        let url = format!("{}/v1/models", worker.spec.url.trim_end_matches('/'));
        let answer = gateway.client.get(url).timeout(Duration::from_secs(2)).send().await;
        let Ok(answer) = answer else { continue };
        let Ok(list) = answer.json::<Value>().await else { continue };
        for model in list["data"].as_array().into_iter().flatten() {
            if !data.iter().any(|m| m["id"] == model["id"]) {
                data.push(model.clone());
            }
        }
    }
    Json(json!({"object": "list", "data": data}))
}

/// `GET /health`: 200 while some worker takes requests, 503 otherwise.
pub async fn health(State(gateway): State<Arc<Gateway>>) -> Response {
    let healthy = gateway.fleet.healthy().len();
    let status = if healthy > 0 {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(json!({"healthy_workers": healthy, "workers": gateway.fleet.all().len()})))
        .into_response()
}

/// `GET /metrics`.
pub async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response {
    gateway.refresh_metrics();
    ([(CONTENT_TYPE, METRICS_TYPE)], gateway.metrics.render()).into_response()
}

//! The mock engine's HTTP endpoints, answering as a vLLM server does.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::CONTENT_TYPE;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::clock::PreciseClock;
use super::metrics::{CONTENT_TYPE as METRICS_TYPE, EngineMetrics};
use super::scheduler::{Scheduler, Started};
use crate::openai::{self, ApiError, CompletionRequest, Endpoint};
use crate::tokenize::Tokenizer;

/// What every handler shares.
pub struct App {
    /// The served model's name.
    pub model: String,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The longest prompt plus output.
    pub max_model_len: usize,
    /// Tokens generated when a request names no `max_tokens`.
    pub default_max_tokens: u64,
    /// The engine.
    pub scheduler: Arc<Scheduler>,
    /// What its requests wait on: prefills and decode steps last microseconds at a high
    /// speed-up, finer than tokio's timer.
    pub clock: PreciseClock,
    /// Its metrics.
    pub metrics: Arc<EngineMetrics>,
    /// The filler output, one piece of text per token, cycled.
    pub filler: Vec<String>,
}

impl App {
    fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(model) if model != self.model => Err(ApiError::unknown_model(model)),
            _ => Ok(()),
        }
    }

    fn filler_text(&self, tokens: usize) -> String {
        (0..tokens).map(|i| self.filler[i % self.filler.len()].as_str()).collect()
    }
}

/// A request body: its bytes, or the server's refusal (over the limit, say).
type Body = Result<Bytes, BytesRejection>;

/// `POST /v1/completions`.
pub async fn completions(State(app): State<Arc<App>>, body: Body) -> Response {
    generate(app, Endpoint::Completions, body).await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(app): State<Arc<App>>, body: Body) -> Response {
    generate(app, Endpoint::Chat, body).await.unwrap_or_else(IntoResponse::into_response)
}

async fn generate(app: Arc<App>, endpoint: Endpoint, body: Body) -> Result<Response, ApiError> {
    let body = body?;
    let request = CompletionRequest::parse(&body)?;
    app.check_model(Some(&request.model))?;
    let tokens = openai::prompt_tokens(&app.tokenizer, endpoint, &request)?;
    let output = request.output_tokens(app.default_max_tokens);
    if output == 0 {
        return Err(ApiError::bad_request("max_tokens must be at least 1").with_param("max_tokens"));
    }
    let output = usize::try_from(output).unwrap_or(usize::MAX);
    openai::check_context_length(tokens.len(), output, app.max_model_len)?;
    let prompt_len = tokens.len();
    let (id, started) = app.scheduler.submit(tokens, output);
    // Held from here: whatever ends this request (its end, the client leaving) frees its room.
    let running = app.scheduler.running(id);
    let request_id =
        format!("{}-{id}", if endpoint == Endpoint::Chat { "chatcmpl" } else { "cmpl" });
    if !request.stream {
        let started = started.await.map_err(|_| {
            ApiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, "engine stopped")
        })?;
        let step = app.scheduler.decode_step();
        let done = started.first_token_at + step * (output as u32).saturating_sub(1);
        app.clock.sleep_until(done).await;
        app.metrics.generation_tokens.inc_by(output as u64);
        drop(running);
        let text = app.filler_text(output);
        let body = openai::response(endpoint, &request_id, &app.model, &text, prompt_len, output);
        return Ok(Json(body).into_response());
    }
    // As vLLM does, a stream's head goes out at once; its tokens follow once it is admitted.
    let (sender, receiver) = mpsc::channel(8);
    let stream = Stream { app: Arc::clone(&app), endpoint, id: request_id, prompt_len, output };
    let include_usage = request.include_usage();
    tokio::spawn(async move {
        let _running = running;
        let started = tokio::select! {
            started = started => started,
            // The client left while it waited: admission finishes it.
            () = sender.closed() => return,
        };
        if let Ok(started) = started {
            stream.run(started, include_usage, sender).await;
        }
    });
    let events = stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok::<_, Infallible>(event), receiver))
    });
    Ok(Sse::new(events).into_response())
}

/// One streamed answer being produced.
struct Stream {
    app: Arc<App>,
    endpoint: Endpoint,
    id: String,
    prompt_len: usize,
    output: usize,
}

impl Stream {
    /// Sends a chunk per token at the engine's pace; stops when the client is gone.
    async fn run(self, started: Started, include_usage: bool, sender: mpsc::Sender<Event>) {
        let Self { app, endpoint, id, .. } = &self;
        let step = app.scheduler.decode_step();
        let mut next = started.first_token_at;
        for i in 0..self.output {
            app.clock.sleep_until(next).await;
            let piece = &app.filler[i % app.filler.len()];
            let chunk = openai::chunk(*endpoint, id, &app.model, piece, i == 0, false);
            if sender.send(Event::default().data(chunk.to_string())).await.is_err() {
                return;
            }
            app.metrics.generation_tokens.inc();
            next += step;
        }
        let last = openai::chunk(*endpoint, id, &app.model, "", false, true);
        let mut tail = vec![last];
        if include_usage {
            tail.push(openai::usage_chunk(*endpoint, id, &app.model, self.prompt_len, self.output));
        }
        for chunk in tail {
            if sender.send(Event::default().data(chunk.to_string())).await.is_err() {
                return;
            }
        }
        let _ = sender.send(Event::default().data("[DONE]")).await;
    }
}

/// `POST /tokenize`'s body: a prompt, or messages.
#[derive(Deserialize)]
struct TokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Value>,
    #[serde(default)]
    add_special_tokens: Option<bool>,
    #[serde(default)]
    add_generation_prompt: Option<bool>,
}

/// `POST /tokenize`, as vLLM answers it.
pub async fn tokenize(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let result: Result<Value, ApiError> = (|| {
        let request: TokenizeRequest = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))?;
        app.check_model(request.model.as_deref())?;
        let bad = |e: crate::tokenize::TokenizeError| ApiError::bad_request(e.to_string());
        let tokens = match (&request.prompt, &request.messages) {
            (Some(prompt), None) => app
                .tokenizer
                .encode(prompt, request.add_special_tokens.unwrap_or(true))
                .map_err(bad)?,
            (None, Some(messages)) => {
                let generation = request.add_generation_prompt.unwrap_or(true);
                let text = app.tokenizer.apply_chat_template(messages, generation).map_err(bad)?;
                app.tokenizer
                    .encode(&text, request.add_special_tokens.unwrap_or(false))
                    .map_err(bad)?
            }
            _ => return Err(ApiError::bad_request("give either a prompt or messages")),
        };
        Ok(json!({
            "count": tokens.len(), "max_model_len": app.max_model_len, "tokens": tokens,
            "token_strs": null,
        }))
    })();
    result.map(Json).into_response()
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    tokens: Vec<u32>,
}

/// `POST /detokenize`.
pub async fn detokenize(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let result: Result<Value, ApiError> = (|| {
        let request: DetokenizeRequest = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))?;
        app.check_model(request.model.as_deref())?;
        let prompt = app
            .tokenizer
            .decode(&request.tokens, false)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(json!({ "prompt": prompt }))
    })();
    result.map(Json).into_response()
}

/// `GET /v1/models`.
pub async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": app.model, "object": "model", "created": openai::unix_now(), "owned_by": "vllm",
        "root": app.model, "parent": null, "max_model_len": app.max_model_len,
    }]}))
}

/// `GET /health`.
pub async fn health() {}

/// `GET /metrics`.
pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    ([(CONTENT_TYPE, METRICS_TYPE)], app.metrics.render()).into_response()
}

//! The parts of the OpenAI HTTP API that the gateway and the mock engine read and write: the
//! request fields they look at (everything else is forwarded untouched), the error body, and
//! the completion responses and stream chunks a vLLM server sends.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

/// An error answered as OpenAI (and vLLM) answer one: `{"error": {message, type, param, code}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<&'static str>,
}

impl ApiError {
    /// A 400: the request is malformed or asks for what cannot be done.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into(), param: None }
    }

    /// A 404 for a model nobody serves.
    pub fn unknown_model(model: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist."),
            param: Some("model"),
        }
    }

    /// Any other status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), param: None }
    }

    /// The same error, naming the field at fault.
    pub fn with_param(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    /// The error type string OpenAI's clients map to an exception class.
    pub fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "BadRequestError",
            StatusCode::NOT_FOUND => "NotFoundError",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestTooLargeError",
            StatusCode::UNPROCESSABLE_ENTITY => "UnprocessableEntityError",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableError",
            StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => "UpstreamError",
            _ => "InternalServerError",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

/// A body the server refused (over the limit, say), with its status.
impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> Self {
        Self::new(rejection.status(), rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// Which endpoint a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/completions`: a prompt.
    Completions,
    /// `/v1/chat/completions`: messages.
    Chat,
}

impl Endpoint {
    /// Its path.
    pub fn path(self) -> &'static str {
        match self {
            Self::Completions => "/v1/completions",
            Self::Chat => "/v1/chat/completions",
        }
    }
}

/// The fields of a completion request the gateway and the mocker read.
#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    /// The model asked for.
    pub model: String,
    /// `/v1/completions`: a string, or token ids (a list of one of either is taken too).
    #[serde(default)]
    pub prompt: Option<Value>,
    /// `/v1/chat/completions`: the conversation.
    #[serde(default)]
    pub messages: Option<Value>,
    /// Tokens to generate.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Chat's newer name for `max_tokens`.
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// Whether the answer is a server-sent event stream.
    #[serde(default)]
    pub stream: bool,
    /// `{"include_usage": true}` adds a usage chunk at the end of a stream.
    #[serde(default)]
    pub stream_options: Option<Value>,
    /// Chat: append the assistant's turn opener (default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
}

/// A completion prompt: text, or token ids already.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Text to tokenize.
    Text(String),
    /// Token ids.
    Tokens(Vec<u32>),
}

impl CompletionRequest {
    /// Parses a request body, answering a 400 for what is not one.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
    }

    /// The tokens to generate: `max_completion_tokens`, else `max_tokens`, else `default`.
    pub fn output_tokens(&self, default: u64) -> u64 {
        self.max_completion_tokens.or(self.max_tokens).unwrap_or(default)
    }

    /// Whether a stream should end with a usage chunk.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The completion prompt, as one text or one list of token ids.
    pub fn prompt(&self) -> Result<Prompt, ApiError> {
        let invalid = || {
            ApiError::bad_request("prompt must be a string or a list of token ids")
                .with_param("prompt")
        };
        let prompt = self.prompt.as_ref().ok_or_else(|| {
            ApiError::bad_request("a completion request needs a prompt").with_param("prompt")
        })?;
        match prompt {
            Value::String(text) => Ok(Prompt::Text(text.clone())),
            Value::Array(items) if items.len() == 1 && !items[0].is_number() => match &items[0] {
                Value::String(text) => Ok(Prompt::Text(text.clone())),
                Value::Array(ids) => token_ids(ids).map(Prompt::Tokens).ok_or_else(invalid),
                _ => Err(invalid()),
            },
            Value::Array(items) if items.iter().all(Value::is_number) && !items.is_empty() => {
                token_ids(items).map(Prompt::Tokens).ok_or_else(invalid)
            }
            Value::Array(_) => Err(ApiError::bad_request(
                "one prompt per request: a batch of prompts is not supported",
            )
            .with_param("prompt")),
            _ => Err(invalid()),
        }
    }
}

fn token_ids(items: &[Value]) -> Option<Vec<u32>> {
    items.iter().map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok())).collect()
}

/// Seconds since the epoch, for `created`.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The usage object.
pub fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// A whole (non-streamed) response.
pub fn response(
    endpoint: Endpoint,
    id: &str,
    model: &str,
    text: &str,
    prompt_tokens: usize,
    completion_tokens: usize,
) -> Value {
    let choice = match endpoint {
        Endpoint::Completions => json!({
            "index": 0, "text": text, "logprobs": null, "finish_reason": "length",
            "stop_reason": null,
        }),
        Endpoint::Chat => json!({
            "index": 0, "message": {"role": "assistant", "content": text},
            "logprobs": null, "finish_reason": "length", "stop_reason": null,
        }),
    };
    json!({
        "id": id,
        "object": match endpoint { Endpoint::Completions => "text_completion", Endpoint::Chat => "chat.completion" },
        "created": unix_now(),
        "model": model,
        "choices": [choice],
        "usage": usage(prompt_tokens, completion_tokens),
    })
}

/// One stream chunk carrying `text` (chat's first chunk also names the role), or the last one
/// (`finish` set, no text).
pub fn chunk(
    endpoint: Endpoint,
    id: &str,
    model: &str,
    text: &str,
    first: bool,
    finish: bool,
) -> Value {
    let finish_reason = if finish { json!("length") } else { Value::Null };
    let (object, choice) = match endpoint {
        Endpoint::Completions => (
            "text_completion",
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason}),
        ),
        Endpoint::Chat => {
            let delta = if first {
                json!({"role": "assistant", "content": text})
            } else if finish {
                json!({})
            } else {
                json!({"content": text})
            };
            (
                "chat.completion.chunk",
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}),
            )
        }
    };
    json!({"id": id, "object": object, "created": unix_now(), "model": model, "choices": [choice]})
}

/// The usage chunk that ends a stream when `stream_options.include_usage` is set.
pub fn usage_chunk(
    endpoint: Endpoint,
    id: &str,
    model: &str,
    prompt: usize,
    completion: usize,
) -> Value {
    let object = match endpoint {
        Endpoint::Completions => "text_completion",
        Endpoint::Chat => "chat.completion.chunk",
    };
    json!({
        "id": id, "object": object, "created": unix_now(), "model": model, "choices": [],
        "usage": usage(prompt, completion),
    })
}

/// The prompt tokens of a request, as vLLM computes them: a chat's messages through the chat
/// template (no special tokens added after), a completion's text with them, token ids as given
/// (each below the vocabulary's size).
pub fn prompt_tokens(
    tokenizer: &crate::tokenize::Tokenizer,
    endpoint: Endpoint,
    request: &CompletionRequest,
) -> Result<Vec<u32>, ApiError> {
    let bad = |e: crate::tokenize::TokenizeError| ApiError::bad_request(e.to_string());
    let tokens = match endpoint {
        Endpoint::Chat => {
            let messages = request.messages.as_ref().ok_or_else(|| {
                ApiError::bad_request("a chat request needs messages").with_param("messages")
            })?;
            let add_generation_prompt = request.add_generation_prompt.unwrap_or(true);
            let text =
                tokenizer.apply_chat_template(messages, add_generation_prompt).map_err(bad)?;
            tokenizer.encode(&text, false).map_err(bad)?
        }
        Endpoint::Completions => match request.prompt()? {
            Prompt::Text(text) => tokenizer.encode(&text, true).map_err(bad)?,
            Prompt::Tokens(ids) => {
                let vocab = tokenizer.vocab_size();
                if let Some(id) = ids.iter().find(|&&id| id as usize >= vocab) {
                    return Err(ApiError::bad_request(format!(
                        "token id {id} is out of vocabulary (size {vocab})"
                    ))
                    .with_param("prompt"));
                }
                ids
            }
        },
    };
    if tokens.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty").with_param("prompt"));
    }
    Ok(tokens)
}

/// vLLM's answer to a prompt plus output longer than the model takes.
pub fn check_context_length(
    prompt: usize,
    output: usize,
    max_model_len: usize,
) -> Result<(), ApiError> {
    if prompt + output > max_model_len {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_model_len} tokens. However, you \
             requested {} tokens ({prompt} in the messages, {output} in the completion). \
             Please reduce the length of the messages or completion.",
            prompt + output
        )));
    }
    Ok(())
}

//! Requests that are not gRPC are refused before a handler sees them: the
//! gRPC spec asks servers to answer a `content-type` that does not begin
//! with `application/grpc` with HTTP 415 (tonic serves them as gRPC).

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Routes that refuse every request whose content type is not gRPC.
pub fn grpc_only(routes: tonic::service::Routes) -> tonic::service::Routes {
    routes
        .into_axum_router()
        .layer(axum::middleware::from_fn(require_grpc))
        .into()
}

async fn require_grpc(request: Request, next: Next) -> Response {
    let is_grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v == "application/grpc"
                || v.starts_with("application/grpc+")
                || v.starts_with("application/grpc;")
        });
    if is_grpc {
        next.run(request).await
    } else {
        StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response()
    }
}

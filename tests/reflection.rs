//! gRPC server reflection: both v1alpha (grpcurl 1.8) and v1 list redq's services
//! and serve their descriptors.

mod common;

use common::*;

const EXPECTED_SERVICES: &[&str] = &[QUEUE_SERVICE, "grpc.health.v1.Health"];

/// One test per reflection version: the generated modules differ only in path.
macro_rules! lists_services_and_descriptors {
    ($test:ident, $version:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            use tonic_reflection::pb::$version::ServerReflectionRequest;
            use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
            use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
            use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;
            let version = stringify!($version);

            let redis = RedisServer::start();
            let server = TestServer::start(&redis.url(), &[]).await;
            let mut reflection = ServerReflectionClient::new(server.channel().await);
            let requests = [
                ServerReflectionRequest {
                    host: String::new(),
                    message_request: Some(MessageRequest::ListServices(String::new())),
                },
                ServerReflectionRequest {
                    host: String::new(),
                    message_request: Some(MessageRequest::FileContainingSymbol(
                        QUEUE_SERVICE.to_string(),
                    )),
                },
            ];
            let mut responses = reflection
                .server_reflection_info(tokio_stream::iter(requests))
                .await
                .unwrap_or_else(|s| panic!("{version} reflection: {s:?}"))
                .into_inner();

            let names: Vec<String> = match next_response(&mut responses).await.message_response {
                Some(MessageResponse::ListServicesResponse(list)) => {
                    list.service.into_iter().map(|s| s.name).collect()
                }
                other => panic!("unexpected reflection response {other:?}"),
            };
            for want in EXPECTED_SERVICES {
                assert!(
                    names.iter().any(|n| n == want),
                    "{version} ListServices lacks {want}: {names:?}"
                );
            }
            match next_response(&mut responses).await.message_response {
                Some(MessageResponse::FileDescriptorResponse(files)) => assert!(
                    !files.file_descriptor_proto.is_empty(),
                    "no descriptors for {QUEUE_SERVICE}"
                ),
                other => panic!("FileContainingSymbol({QUEUE_SERVICE}) answered {other:?}"),
            }
        }
    };
}

lists_services_and_descriptors!(reflection_v1alpha_lists_services, v1alpha);
lists_services_and_descriptors!(reflection_v1_lists_services, v1);

/// The next response of a reflection stream, bounded.
async fn next_response<T>(responses: &mut tonic::Streaming<T>) -> T {
    tokio::time::timeout(EVENTUALLY, responses.message())
        .await
        .expect("reflection answers")
        .expect("reflection stream")
        .expect("a response")
}

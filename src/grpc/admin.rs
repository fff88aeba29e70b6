//! `redq.v1.AdminService`: validate and convert, call the broker, convert back.

use super::convert;
use crate::broker::Broker;
use crate::pb;
use crate::pb::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

pub struct AdminApi {
    broker: Broker,
}

impl AdminApi {
    pub fn new(broker: Broker) -> Self {
        Self { broker }
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        let pb::ListDeadLettersRequest {
            topic,
            subscription,
            page_size,
            page_token,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("subscription", &subscription)?;
        let (page_size, after) = convert::dead_letter_page(page_size, &page_token)?;
        let page = self
            .broker
            .dead_letters(&topic, &subscription, after.as_deref(), page_size)
            .await?;
        Ok(Response::new(pb::ListDeadLettersResponse {
            dead_letters: page
                .dead_letters
                .into_iter()
                .map(convert::dead_letter)
                .collect(),
            next_page_token: page.next_after.unwrap_or_default(),
        }))
    }
}

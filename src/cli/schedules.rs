//! `redq schedules` and `redq schedule put|delete`: recurring schedules from a shell.

use super::format::{self, Table};
use super::{admin_client, connect, print, status_error};
use crate::config::{RecurringCommand, ScheduleNameArgs, SchedulePutArgs, SchedulesArgs};
use crate::error::BoxError;
use crate::pb;

/// Bound on pages followed, so a server that keeps answering with a token
/// cannot keep the CLI going forever.
const MAX_PAGES: usize = 1_000_000;

/// `redq schedules TOPIC`: every schedule of the topic (all pages) with its
/// next and last runs.
pub async fn list(args: SchedulesArgs) -> Result<(), BoxError> {
    let SchedulesArgs { topic, server } = args;
    let mut admin = admin_client(connect(&server.server, &server.tls).await?);
    let mut schedules = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = admin
            .list_schedules(pb::ListSchedulesRequest {
                topic: topic.clone(),
                page_size: 1000,
                page_token,
            })
            .await
            .map_err(status_error)?
            .into_inner();
        schedules.extend(page.schedules);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    print(&schedules_table(&schedules))?;
    Ok(())
}

/// One row per schedule: name, when it runs, next and last run, runs.
fn schedules_table(schedules: &[pb::Schedule]) -> String {
    let mut table = Table::new(&["NAME", "WHEN", "NEXT RUN", "LAST RUN", "RUNS"]);
    for schedule in schedules {
        let next = match (&schedule.next_run, schedule.paused) {
            (_, true) => "paused".to_owned(),
            (Some(next), false) => {
                format!("{} ({})", format::rfc3339(next), format::relative(next))
            }
            (None, false) => "ended".to_owned(),
        };
        table.row(vec![
            schedule.name.clone(),
            when(schedule),
            next,
            format::timestamp(schedule.last_run.as_ref()),
            schedule.runs.to_string(),
        ]);
    }
    table.render()
}

/// `cron 0 2 * * * Europe/Paris` or `every 30s`.
fn when(schedule: &pb::Schedule) -> String {
    if schedule.cron.is_empty() {
        format!("every {}", format::duration(schedule.every.as_ref()))
    } else if schedule.time_zone.is_empty() {
        format!("cron {} UTC", schedule.cron)
    } else {
        format!("cron {} {}", schedule.cron, schedule.time_zone)
    }
}

/// `redq schedule put|delete`.
pub async fn recurring(command: RecurringCommand) -> Result<(), BoxError> {
    match command {
        RecurringCommand::Put(args) => put(args).await,
        RecurringCommand::Delete(args) => delete(args).await,
    }
}

/// Puts the schedule and prints its next run.
async fn put(args: SchedulePutArgs) -> Result<(), BoxError> {
    let SchedulePutArgs {
        topic,
        name,
        cron,
        every,
        time_zone,
        payload,
        start,
        end,
        paused,
        catch_up,
        attributes,
        ordering_key,
        server,
    } = args;
    let every = every
        .map(prost_types::Duration::try_from)
        .transpose()
        .map_err(|_| "--every: too long")?;
    let schedule = pb::Schedule {
        topic,
        name,
        cron: cron.unwrap_or_default(),
        every,
        time_zone,
        message: Some(pb::PublishMessage {
            payload: payload.into_bytes().into(),
            attributes: attributes.into_iter().collect(),
            ordering_key: ordering_key.unwrap_or_default(),
            ..Default::default()
        }),
        start_time: start,
        end_time: end,
        paused,
        catch_up,
        ..Default::default()
    };
    let mut admin = admin_client(connect(&server.server, &server.tls).await?);
    let schedule = admin
        .put_schedule(pb::PutScheduleRequest {
            schedule: Some(schedule),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    print(&schedules_table(std::slice::from_ref(&schedule)))?;
    Ok(())
}

async fn delete(args: ScheduleNameArgs) -> Result<(), BoxError> {
    let ScheduleNameArgs {
        topic,
        name,
        server,
    } = args;
    let mut admin = admin_client(connect(&server.server, &server.tls).await?);
    admin
        .delete_schedule(pb::DeleteScheduleRequest {
            topic,
            name: name.clone(),
        })
        .await
        .map_err(status_error)?;
    print(&format!("deleted {name}\n"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_when_each_schedule_runs() {
        let nightly = pb::Schedule {
            name: "nightly".into(),
            cron: "0 2 * * *".into(),
            time_zone: "Europe/Paris".into(),
            paused: true,
            runs: 3,
            last_run: Some(prost_types::Timestamp {
                seconds: 1_796_000_000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let tick = pb::Schedule {
            name: "tick".into(),
            every: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            ..Default::default()
        };
        let table = schedules_table(&[nightly, tick]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{table}");
        assert!(lines[1].contains("cron 0 2 * * * Europe/Paris"), "{table}");
        assert!(
            lines[1].contains("paused") && lines[1].ends_with('3'),
            "{table}"
        );
        assert!(
            lines[2].contains("every 30s") && lines[2].contains("ended"),
            "{table}"
        );
    }
}

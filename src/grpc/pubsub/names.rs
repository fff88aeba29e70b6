//! Pub/Sub resource names (`projects/{p}/topics/{t}`,
//! `projects/{p}/subscriptions/{s}`) and the redq names they map to.
//!
//! A Pub/Sub topic is the redq topic `<project>.<topic id>`, and its
//! subscription the redq subscription `<project>.<subscription id>` on it,
//! so that `redq.v1` clients, the CLI and the metrics see them under names
//! a person can read. Pub/Sub ids allow `~`, `+` and `%` and run to 255
//! characters, redq names do not: such an id maps to `0` and 32 hex digits
//! of its SHA-256 (an id starts with a letter, so the two forms never
//! meet). A project's characters outside `[A-Za-z0-9-]` are written `_XX`.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};

/// The longest redq name (see `convert::check_name`).
const MAX_REDQ_NAME: usize = 200;

/// A topic's or subscription's project and id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceName {
    pub project: String,
    pub id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collection {
    Topics,
    Subscriptions,
}

impl Collection {
    fn segment(self) -> &'static str {
        match self {
            Collection::Topics => "topics",
            Collection::Subscriptions => "subscriptions",
        }
    }
}

impl ResourceName {
    /// Parses `projects/{project}/{collection}/{id}` from the request's `field`.
    pub fn parse(field: &str, name: &str, collection: Collection) -> Result<Self> {
        let invalid = || {
            Error::invalid(
                field,
                format!(
                    "must be projects/{{project}}/{}/{{id}}, got {name:?}",
                    collection.segment()
                ),
            )
        };
        let rest = name.strip_prefix("projects/").ok_or_else(invalid)?;
        let (project, rest) = rest.split_once('/').ok_or_else(invalid)?;
        let id = rest
            .strip_prefix(collection.segment())
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(invalid)?;
        check_project(field, project)?;
        check_id(field, id)?;
        Ok(Self {
            project: project.to_owned(),
            id: id.to_owned(),
        })
    }

    pub fn path(&self, collection: Collection) -> String {
        format!(
            "projects/{}/{}/{}",
            self.project,
            collection.segment(),
            self.id
        )
    }

    /// The redq topic or subscription name this resource is.
    pub fn redq_name(&self) -> String {
        let project = escape_project(&self.project);
        let plain = self
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if plain && project.len() + 1 + self.id.len() <= MAX_REDQ_NAME {
            format!("{project}.{}", self.id)
        } else {
            let digest = Sha256::digest(self.id.as_bytes());
            format!("{project}.0{}", hex::encode(&digest[..16]))
        }
    }
}

/// The project of a `projects/{project}` name.
pub fn parse_project(field: &str, name: &str) -> Result<String> {
    let project = name.strip_prefix("projects/").ok_or_else(|| {
        Error::invalid(field, format!("must be projects/{{project}}, got {name:?}"))
    })?;
    check_project(field, project)?;
    Ok(project.to_owned())
}

/// Project ids are 6 to 30 lowercase letters, digits and hyphens, some
/// with a domain (`example.com:my-project`); redq takes up to 100
/// characters of letters, digits and `-._:`, starting with a letter or digit.
fn check_project(field: &str, project: &str) -> Result<()> {
    let valid = !project.is_empty()
        && project.len() <= 100
        && project.as_bytes()[0].is_ascii_alphanumeric()
        && project
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("project {project:?} must match [A-Za-z0-9][A-Za-z0-9._:-]{{0,99}}"),
        ))
    }
}

/// Pub/Sub's rule for topic and subscription ids.
fn check_id(field: &str, id: &str) -> Result<()> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-_.~+%".contains(&b);
    let valid = (3..=255).contains(&id.len())
        && id.as_bytes()[0].is_ascii_alphabetic()
        && id.bytes().all(allowed)
        && !id.to_ascii_lowercase().starts_with("goog");
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!(
                "id {id:?} must be 3 to 255 characters of [A-Za-z0-9-_.~+%], start with a letter and not with \"goog\""
            ),
        ))
    }
}

fn escape_project(project: &str) -> String {
    let mut escaped = String::with_capacity(project.len());
    for b in project.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            escaped.push(b as char);
        } else {
            escaped.push_str(&format!("_{b:02X}"));
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str) -> Result<ResourceName> {
        ResourceName::parse("topic", name, Collection::Topics)
    }

    #[test]
    fn names_parse_and_print_back() {
        let name = topic("projects/my-project/topics/orders").unwrap();
        assert_eq!(name.project, "my-project");
        assert_eq!(name.id, "orders");
        assert_eq!(
            name.path(Collection::Topics),
            "projects/my-project/topics/orders"
        );
        let sub = ResourceName::parse(
            "subscription",
            "projects/p1/subscriptions/sub_1",
            Collection::Subscriptions,
        )
        .unwrap();
        assert_eq!(sub.redq_name(), "p1.sub_1");
    }

    #[test]
    fn malformed_names_are_refused_naming_the_field() {
        for bad in [
            "",
            "orders",
            "projects/p/topics/",
            "projects/p/topics/ab",
            "projects/p/subscriptions/orders",
            "projects//topics/orders",
            "projects/p/topics/1abc",
            "projects/p/topics/googly",
            "projects/p/topics/a b c",
            "projects/p/topics/orders/extra",
            &format!("projects/p/topics/{}", "a".repeat(256)),
        ] {
            match topic(bad) {
                Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "topic", "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn ids_redq_cannot_spell_map_to_a_digest() {
        let plain = topic("projects/p/topics/orders.v2_x-1").unwrap();
        assert_eq!(plain.redq_name(), "p.orders.v2_x-1");
        let odd = topic("projects/p/topics/a~b+c%d").unwrap();
        let mapped = odd.redq_name();
        assert!(
            mapped.starts_with("p.0") && mapped.len() == 2 + 1 + 32,
            "{mapped}"
        );
        assert_ne!(
            mapped,
            topic("projects/p/topics/a~b+c%e").unwrap().redq_name()
        );
        let long = topic(&format!("projects/p/topics/{}", "a".repeat(255))).unwrap();
        assert!(long.redq_name().len() <= MAX_REDQ_NAME);
        crate::grpc::convert::check_name("topic", &long.redq_name()).unwrap();
        crate::grpc::convert::check_name("topic", &mapped).unwrap();
    }

    #[test]
    fn projects_with_a_domain_are_escaped() {
        let name = topic("projects/example.com:app/topics/jobs").unwrap();
        assert_eq!(name.redq_name(), "example_2Ecom_3Aapp.jobs");
        crate::grpc::convert::check_name("topic", &name.redq_name()).unwrap();
        // Escaping keeps projects apart: "a.b" + "c" is not "a" + "b.c".
        let a = topic("projects/a.b/topics/cde").unwrap().redq_name();
        let b = topic("projects/a/topics/b.cde").unwrap().redq_name();
        assert_ne!(a, b);
    }
}

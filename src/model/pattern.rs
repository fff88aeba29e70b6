//! Name patterns, NATS style, of token grants and of the streams that
//! subscribe to EPHEMERAL topics by pattern: names are `.`-separated
//! segments; `*` stands for one segment, and `>`, last, for one or more.

/// A parsed pattern, such as `orders`, `orders.*.eu` or `orders.>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `*`: any one segment.
    One,
    /// `>`: the rest, at least one segment.
    Rest,
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("a pattern is not empty".into());
        }
        let parts: Vec<&str> = text.split('.').collect();
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            segments.push(match *part {
                "" => return Err(format!("{text:?} has an empty segment")),
                "*" => Segment::One,
                ">" if i + 1 == parts.len() => Segment::Rest,
                ">" => return Err(format!("{text:?}: `>` is only allowed last")),
                literal if literal.contains(['*', '>']) => {
                    return Err(format!("{text:?}: `*` and `>` stand alone between dots"));
                }
                literal => Segment::Literal(literal.to_owned()),
            });
        }
        Ok(Self { segments })
    }

    /// The literal segments before the first wildcard, joined by dots, with a
    /// trailing dot when a wildcard follows (`sensors.*.temp` → `sensors.`;
    /// `sensors.eu` → `sensors.eu`): what every matching name starts with.
    pub fn literal_prefix(&self) -> String {
        let mut prefix = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(literal) => {
                    prefix.push_str(literal);
                    prefix.push('.');
                }
                Segment::One | Segment::Rest => return prefix,
            }
        }
        prefix.pop(); // no wildcard: the name itself
        prefix
    }

    /// Whether the pattern has no wildcard (it matches one name only).
    pub fn is_literal(&self) -> bool {
        self.segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
    }

    pub fn matches(&self, name: &str) -> bool {
        let mut parts = name.split('.');
        for segment in &self.segments {
            match (segment, parts.next()) {
                (_, None) => return false,
                (Segment::Rest, Some(_)) => return true,
                (Segment::One, Some(_)) => {}
                (Segment::Literal(literal), Some(part)) if literal == part => {}
                (Segment::Literal(_), Some(_)) => return false,
            }
        }
        parts.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn matches(pattern: &str, name: &str) -> bool {
        Pattern::parse(pattern).unwrap().matches(name)
    }

    #[test]
    fn literals_wildcards_and_the_rest() {
        assert!(matches("orders", "orders"));
        assert!(!matches("orders", "orders2"));
        assert!(!matches("orders", "orders.eu"));
        assert!(matches("orders.*", "orders.eu"));
        assert!(!matches("orders.*", "orders"));
        assert!(!matches("orders.*", "orders.eu.paris"));
        assert!(matches("orders.>", "orders.eu.paris"));
        assert!(!matches("orders.>", "orders"));
        assert!(!matches("orders.>", "orders2.eu"));
        assert!(matches(">", "anything.at.all"));
        assert!(matches("*.eu", "orders.eu"));
    }

    #[test]
    fn the_literal_prefix_stops_at_the_first_wildcard() {
        let prefix = |p: &str| Pattern::parse(p).unwrap().literal_prefix();
        assert_eq!(prefix("sensors.*.temp"), "sensors.");
        assert_eq!(prefix("sensors.>"), "sensors.");
        assert_eq!(prefix(">"), "");
        assert_eq!(prefix("sensors.eu"), "sensors.eu");
        assert!(Pattern::parse("a.b").unwrap().is_literal());
        assert!(!Pattern::parse("a.*").unwrap().is_literal());
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in ["", "a..b", ".a", "a.", "a.>.b", "ord*", "a>", ">a"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    fn segment() -> impl Strategy<Value = String> {
        "[a-z0-9_-]{1,6}"
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(segment(), 1..5).prop_map(|s| s.join("."))
    }

    proptest! {
        #[test]
        fn a_literal_pattern_matches_only_its_own_name(a in name(), b in name()) {
            prop_assert!(matches(&a, &a));
            prop_assert_eq!(matches(&a, &b), a == b);
        }

        #[test]
        fn no_grant_leaks_to_a_name_that_shares_a_prefix(a in name(), suffix in "[a-z0-9]{1,4}") {
            // `orders` never covers `orders2`, nor `orders.>` cover `orders2.x`.
            let longer = format!("{a}{suffix}");
            prop_assert!(!matches(&a, &longer));
            let rest = format!("{a}.>");
            let under_longer = format!("{longer}.x");
            prop_assert!(!matches(&rest, &under_longer));
            prop_assert!(!matches(&rest, &a));
        }

        #[test]
        fn the_rest_matches_exactly_the_names_below(a in name(), below in name()) {
            let rest = format!("{a}.>");
            let under = format!("{a}.{below}");
            prop_assert!(matches(&rest, &under));
            prop_assert!(matches(">", &under));
        }

        #[test]
        fn one_matches_one_segment(a in name(), s in segment(), t in segment()) {
            let one = format!("{a}.*");
            let with_s = format!("{a}.{s}");
            let with_st = format!("{a}.{s}.{t}");
            prop_assert!(matches(&one, &with_s));
            prop_assert!(!matches(&one, &with_st));
        }

        #[test]
        fn any_text_parses_or_is_refused_without_panicking(text in ".{0,40}", name in ".{0,40}") {
            if let Ok(pattern) = Pattern::parse(&text) {
                let _ = pattern.matches(&name);
            }
        }
    }
}

//! Grant patterns: the input is `pattern`, a newline, then `name` (the whole
//! input is both when it has no newline) → `Pattern::parse`, then `matches`.
//! Invariants: a pattern with no `*` or `>` matches exactly its own text;
//! a matched name starts with the pattern's literal prefix.

#![no_main]

use libfuzzer_sys::fuzz_target;
use redq::model::Pattern;

fuzz_target!(|text: &str| {
    let (pattern_text, name) = text.split_once('\n').unwrap_or((text, text));
    let Ok(pattern) = Pattern::parse(pattern_text) else {
        return;
    };
    let matched = pattern.matches(name);
    // Every name it matches starts with its literal prefix (an EPHEMERAL
    // pattern stream's Redis channel pattern is built on it).
    if matched {
        assert!(name.starts_with(&pattern.literal_prefix()), "{pattern_text:?} vs {name:?}");
    }
    // Parsing is deterministic, and the parsed pattern parses the same.
    assert_eq!(Pattern::parse(pattern_text).as_ref(), Ok(&pattern));

    let segments: Vec<&str> = pattern_text.split('.').collect();
    assert!(segments.iter().all(|s| !s.is_empty()));
    if !pattern_text.contains(['*', '>']) {
        assert_eq!(matched, name == pattern_text, "{pattern_text:?} vs {name:?}");
        assert!(pattern.matches(pattern_text));
        return;
    }
    // With wildcards: a match has as many segments as the pattern (or more,
    // with a last `>`), and its literal segments are the pattern's.
    if matched {
        let parts: Vec<&str> = name.split('.').collect();
        let rest = segments.last() == Some(&">");
        if rest {
            assert!(parts.len() >= segments.len(), "{pattern_text:?} vs {name:?}");
        } else {
            assert_eq!(parts.len(), segments.len(), "{pattern_text:?} vs {name:?}");
        }
        for (segment, part) in segments.iter().zip(&parts) {
            if !matches!(*segment, "*" | ">") {
                assert_eq!(segment, part, "{pattern_text:?} vs {name:?}");
            }
        }
    }
    // The pattern's own text, with `*` and `>` read as literal segments,
    // is a name it matches.
    assert!(pattern.matches(pattern_text), "{pattern_text:?}");
});

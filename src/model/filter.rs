//! Pub/Sub subscription filters: the language of Google's "Filter messages
//! from a subscription" page, parsed once when a subscription is created and
//! then matched against each message's attributes.
//!
//! The grammar, as this module reads it (`WS` is one or more of space, tab,
//! CR, LF and form feed):
//!
//! ```text
//! filter     = [WS] [expression [WS]]          ; nothing at all matches every message
//! expression = term {WS "AND" WS term}
//!            | term {WS "OR" WS term}          ; one operator per level: no mixing
//! term       = ["NOT" WS | "-"] simple         ; one negation; NOT (NOT …) for two
//! simple     = "(" [WS] expression [WS] ")"
//!            | "attributes" [WS] ":" [WS] key                     ; has the key
//!            | "attributes." key [WS] ("=" | "!=") [WS] string
//!            | "hasPrefix(" [WS] "attributes." key [WS] "," [WS] string [WS] ")"
//! key        = name | string
//! name       = 1*(ASCII letter | digit | "_" | "-")
//! string     = '"' {any character but '"', '\' and controls | escape} '"'
//! escape     = "\" ("a" | "b" | "f" | "n" | "r" | "t" | "v" | "\" | '"' | "'" | "`" | "?")
//!            | "\" ("x" | "X") 2HEX | "\u" 4HEX | "\U" 8HEX | "\" 3OCTAL (at most \377)
//! ```
//!
//! Google's page gives the operators (`:`, `=`, `!=`, `hasPrefix`, upper-case
//! `AND`, `OR`, `NOT`, unary `-`), the rule that AND and OR mix only through
//! parentheses, which keys need quotes, that strings take Unicode, hex and
//! octal escapes, and the 256-byte limit. Where it is silent (where whitespace
//! may go, how many negations a term takes) this module follows AIP-160,
//! Google's list-filter grammar, which Google's own Pub/Sub fake (pstest)
//! parses filters with; the escapes are those of CEL string literals.

use std::collections::HashMap;

/// Google's limit on a filter, in bytes of its UTF-8 text.
const MAX_BYTES: usize = 256;

/// A parsed Pub/Sub filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// `None` for the empty filter, which matches every message.
    expr: Option<Expr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    /// `attributes:KEY`.
    Has(String),
    /// `attributes.KEY = "VALUE"`. `!=` parses as its negation, so a message
    /// without the key matches `!=`: Google's table describes `!=` as every
    /// message but those `=` selects.
    Equals {
        key: String,
        value: String,
    },
    /// `hasPrefix(attributes.KEY, "PREFIX")`.
    HasPrefix {
        key: String,
        prefix: String,
    },
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

impl Filter {
    /// Err(reason) for a malformed filter or one over the limits.
    ///
    /// The reason names what was expected and where, as a byte offset from 0
    /// into `text`: `expected a string after '=' at byte 15, found 'x'`.
    pub fn parse(text: &str) -> Result<Filter, String> {
        if text.len() > MAX_BYTES {
            return Err(format!(
                "the filter is {} bytes; the limit is {MAX_BYTES}",
                text.len()
            ));
        }
        // No depth limit besides the length: nesting costs a '(' and a ')' a
        // level and a negation needs parentheses to repeat, so 256 bytes keep
        // the recursion below ~130 levels.
        let expr = Parser { text, pos: 0 }.filter()?;
        Ok(Filter { expr })
    }

    /// Whether a message with these attributes is delivered; the empty filter
    /// delivers every message.
    pub fn matches(&self, attributes: &HashMap<String, String>) -> bool {
        self.expr
            .as_ref()
            .is_none_or(|expr| expr.matches(attributes))
    }
}

impl Expr {
    fn matches(&self, attributes: &HashMap<String, String>) -> bool {
        match self {
            Expr::Has(key) => attributes.contains_key(key),
            Expr::Equals { key, value } => attributes.get(key) == Some(value),
            Expr::HasPrefix { key, prefix } => attributes
                .get(key)
                .is_some_and(|value| value.starts_with(prefix.as_str())),
            Expr::Not(inner) => !inner.matches(attributes),
            Expr::And(terms) => terms.iter().all(|term| term.matches(attributes)),
            Expr::Or(terms) => terms.iter().any(|term| term.matches(attributes)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joiner {
    And,
    Or,
}

impl Joiner {
    fn word(self) -> &'static str {
        match self {
            Joiner::And => "AND",
            Joiner::Or => "OR",
        }
    }
}

/// A recursive-descent parser over the text; `pos` is a byte offset that
/// only ever moves past whole characters.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn filter(mut self) -> Result<Option<Expr>, String> {
        self.skip_whitespace();
        if self.at_end() {
            return Ok(None);
        }
        let expr = self.expression()?;
        if self.peek() == Some(b')') {
            return Err(format!("unmatched ')' at byte {}", self.pos));
        }
        if !self.at_end() {
            return Err(self.error("expected AND, OR or the end of the filter"));
        }
        Ok(Some(expr))
    }

    /// Terms joined by AND or by OR, never both: Google's page refuses `a AND
    /// b OR c`, and the precedence AIP-160 would give it (OR tighter than
    /// AND) is not the one most readers assume. Returns after the whitespace
    /// that follows the last term.
    fn expression(&mut self) -> Result<Expr, String> {
        let first = self.term()?;
        let mut rest = Vec::new();
        let mut joiner: Option<(Joiner, usize)> = None;
        loop {
            let spaced = self.skip_whitespace();
            let at = self.pos;
            let word = self.peek_word();
            let this = match word {
                "AND" => Joiner::And,
                "OR" => Joiner::Or,
                _ if is_lower_case_operator(word) => return Err(self.upper_case_error()),
                _ => break,
            };
            if !spaced {
                return Err(format!("expected whitespace before {word} at byte {at}"));
            }
            match joiner {
                Some((first_joiner, first_at)) if first_joiner != this => {
                    return Err(format!(
                        "{} at byte {at} follows {} at byte {first_at}: AND and OR mix only \
                         with parentheses, as in a AND (b OR c)",
                        this.word(),
                        first_joiner.word(),
                    ));
                }
                Some(_) => {}
                None => joiner = Some((this, at)),
            }
            self.pos += word.len();
            let spaced = self.skip_whitespace();
            if self.at_end() {
                return Err(self.error(&format!("expected a condition after {word}")));
            }
            if !spaced {
                return Err(self.error(&format!("expected whitespace after {word}")));
            }
            rest.push(self.term()?);
        }
        Ok(match joiner {
            None => first,
            Some((joiner, _)) => {
                let mut terms = Vec::with_capacity(rest.len() + 1);
                terms.push(first);
                terms.append(&mut rest);
                match joiner {
                    Joiner::And => Expr::And(terms),
                    Joiner::Or => Expr::Or(terms),
                }
            }
        })
    }

    fn term(&mut self) -> Result<Expr, String> {
        if self.eat(b'-') {
            // AIP-160's minus is followed directly by what it negates (only
            // NOT takes a space), so `- x` is refused rather than guessed at.
            if self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
                return Err(self.error("expected a condition right after '-'"));
            }
            return self.negated("'-'");
        }
        if self.peek_word() == "NOT" {
            self.pos += "NOT".len();
            let spaced = self.skip_whitespace();
            if self.at_end() {
                return Err(self.error("expected a condition after NOT"));
            }
            // AIP-160 requires the space: there `NOT(…)` is a call of a
            // function named NOT.
            if !spaced {
                return Err(self.error("expected whitespace after NOT"));
            }
            return self.negated("NOT");
        }
        self.simple()
    }

    /// What follows a NOT or a '-': AIP-160 allows one negation per term, so
    /// a second one must sit inside parentheses.
    fn negated(&mut self, operator: &str) -> Result<Expr, String> {
        if self.peek() == Some(b'-') || self.peek_word() == "NOT" {
            return Err(format!(
                "{}; to negate twice, use parentheses: NOT (NOT …)",
                self.error(&format!("expected a condition or '(' after {operator}"))
            ));
        }
        Ok(Expr::Not(Box::new(self.simple()?)))
    }

    fn simple(&mut self) -> Result<Expr, String> {
        let open = self.pos;
        if self.eat(b'(') {
            self.skip_whitespace();
            let inner = self.expression()?;
            if !self.eat(b')') {
                return Err(format!(
                    "{} (the '(' at byte {open} is not closed)",
                    self.error("expected AND, OR or ')'")
                ));
            }
            return Ok(inner);
        }
        let word = self.peek_word();
        match word {
            "attributes" => {
                self.pos += word.len();
                self.restriction()
            }
            "hasPrefix" => {
                self.pos += word.len();
                self.has_prefix()
            }
            _ if is_lower_case_operator(word) => Err(self.upper_case_error()),
            _ if !word.is_empty() && self.text[self.pos + word.len()..].starts_with('(') => {
                Err(format!(
                    "unknown function '{word}' at byte {}: hasPrefix is the only one",
                    self.pos
                ))
            }
            _ if self.peek() == Some(b'"') => Err(format!(
                "{}: the key goes on the left, as in attributes.KEY = \"VALUE\"",
                self.error("expected a condition or '('")
            )),
            _ => Err(self.error("expected a condition or '('")),
        }
    }

    /// After `attributes`: `.KEY = "V"`, `.KEY != "V"` or `:KEY`.
    fn restriction(&mut self) -> Result<Expr, String> {
        // The dot joins a member to its field with no space (AIP-160's member
        // is one token); only the comparators may be surrounded by spaces.
        if self.eat(b'.') {
            let key = self.key()?;
            self.skip_whitespace();
            let negated = if self.eat_str("!=") {
                true
            } else if self.eat(b'=') {
                false
            } else {
                return Err(self.error("expected '=' or '!='"));
            };
            self.skip_whitespace();
            let operator = if negated { "!=" } else { "=" };
            let value = self.string(&format!("expected a string after '{operator}'"))?;
            let equals = Expr::Equals { key, value };
            return Ok(if negated {
                Expr::Not(Box::new(equals))
            } else {
                equals
            });
        }
        self.skip_whitespace();
        if self.eat(b':') {
            self.skip_whitespace();
            return Ok(Expr::Has(self.key()?));
        }
        Err(self.error("expected '.' (with no space before it) or ':' after attributes"))
    }

    /// After `hasPrefix`: `(attributes.KEY, "PREFIX")`.
    fn has_prefix(&mut self) -> Result<Expr, String> {
        if !self.eat(b'(') {
            return Err(self.error("expected '(' right after hasPrefix"));
        }
        self.skip_whitespace();
        if !self.eat_str("attributes.") {
            return Err(self.error("expected attributes.KEY as hasPrefix's first argument"));
        }
        let key = self.key()?;
        self.skip_whitespace();
        if !self.eat(b',') {
            return Err(self.error("expected ',' after hasPrefix's key"));
        }
        self.skip_whitespace();
        let prefix = self.string("expected a string as hasPrefix's second argument")?;
        self.skip_whitespace();
        if !self.eat(b')') {
            return Err(self.error("expected ')' closing hasPrefix"));
        }
        Ok(Expr::HasPrefix { key, prefix })
    }

    /// A bare name of ASCII letters, digits, '_' and '-', or a quoted string:
    /// Google's page asks for quotes around a key with any other character.
    fn key(&mut self) -> Result<String, String> {
        if self.peek() == Some(b'"') {
            return self.string("");
        }
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error(
                "expected an attribute key (letters, digits, '_' and '-', or a quoted string)",
            ));
        }
        let key = &self.text[start..self.pos];
        // Whatever may follow a key legitimately: an operator, a ',' or ')'
        // closing the condition, whitespace, the end. Anything else glued to
        // it (`attributes.iana.org`, `attributes:café`) is a key that needed
        // quotes, and saying so beats "expected '='".
        match self.peek() {
            None | Some(b'=' | b'!' | b',' | b')') => Ok(key.to_owned()),
            Some(b) if b.is_ascii_whitespace() => Ok(key.to_owned()),
            Some(_) => Err(format!(
                "{}; quote a key with other characters, as in \
                 attributes.\"iana.org/language_tag\"",
                self.error(&format!(
                    "expected an operator, ',' or ')' after the key '{key}'"
                ))
            )),
        }
    }

    /// A double-quoted string; `expected` describes it when it is missing.
    fn string(&mut self, expected: &str) -> Result<String, String> {
        if self.peek() != Some(b'"') {
            let hint = if self.peek() == Some(b'\'') {
                " (strings take double quotes)"
            } else {
                ""
            };
            return Err(format!("{}{hint}", self.error(expected)));
        }
        let open = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let at = self.pos;
            let Some(c) = self.peek_char() else {
                return Err(format!("the string opened at byte {open} is not closed"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => out.push(self.escape(at, open)?),
                // Google's page has non-printing characters written as
                // escapes; a raw one is more likely a paste gone wrong.
                c if c.is_control() => {
                    return Err(format!(
                        "unescaped control character {} at byte {at} in a string; write it \
                         as an escape such as \\n or \\u0007",
                        c.escape_debug()
                    ));
                }
                c => out.push(c),
            }
        }
    }

    /// After a backslash at byte `at`. The numeric escapes name Unicode code
    /// points, as in a CEL string: `\xE9` is 'é', not the byte 0xE9, since an
    /// attribute is text.
    fn escape(&mut self, at: usize, open: usize) -> Result<char, String> {
        let Some(c) = self.peek_char() else {
            return Err(format!("the string opened at byte {open} is not closed"));
        };
        self.pos += c.len_utf8();
        Ok(match c {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\\' | '"' | '\'' | '`' | '?' => c,
            'x' | 'X' => self.code_point(at, 2, 16)?,
            'u' => self.code_point(at, 4, 16)?,
            'U' => self.code_point(at, 8, 16)?,
            '0'..='7' => {
                self.pos -= 1; // the first of the three digits
                let c = self.code_point(at, 3, 8)?;
                if u32::from(c) > 0o377 {
                    return Err(format!("the octal escape at byte {at} is over \\377"));
                }
                c
            }
            c => {
                return Err(format!(
                    "unknown escape '\\{}' at byte {at}",
                    c.escape_debug()
                ));
            }
        })
    }

    /// Exactly `digits` digits in `radix`, as one code point.
    fn code_point(&mut self, at: usize, digits: usize, radix: u32) -> Result<char, String> {
        let value = self
            .text
            .get(self.pos..self.pos + digits)
            .filter(|text| text.chars().all(|c| c.is_digit(radix)))
            .and_then(|text| u32::from_str_radix(text, radix).ok());
        let Some(value) = value else {
            let kind = if radix == 16 { "hex" } else { "octal" };
            return Err(format!(
                "the escape at byte {at} needs {digits} {kind} digits"
            ));
        };
        self.pos += digits;
        char::from_u32(value)
            .ok_or_else(|| format!("the escape at byte {at} is not a Unicode scalar value"))
    }

    fn error(&self, expected: &str) -> String {
        format!("{expected} at byte {}, found {}", self.pos, self.found())
    }

    fn upper_case_error(&self) -> String {
        let word = self.peek_word();
        format!(
            "operators are upper case: found '{word}' at byte {}, write {}",
            self.pos,
            word.to_ascii_uppercase()
        )
    }

    /// What stands at the position, for error messages: a whole word rather
    /// than its first letter.
    fn found(&self) -> String {
        let word = self.peek_word();
        if !word.is_empty() {
            return format!("'{word}'");
        }
        match self.peek_char() {
            None => "the end of the filter".to_owned(),
            Some('\'') => "\"'\"".to_owned(),
            Some(c) if c.is_control() => format!("'{}'", c.escape_debug()),
            Some(c) => format!("'{c}'"),
        }
    }

    fn skip_whitespace(&mut self) -> bool {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
        self.pos > start
    }

    /// The run of ASCII letters, digits and '_' at the position: operators,
    /// `attributes` and function names. '-' is left out, as it is the
    /// negation in `-attributes:k`.
    fn peek_word(&self) -> &'a str {
        let rest = &self.text[self.pos..];
        let len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        &rest[..len]
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn peek_char(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn at_end(&self) -> bool {
        self.pos == self.text.len()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let matched = self.peek() == Some(byte);
        if matched {
            self.pos += 1;
        }
        matched
    }

    fn eat_str(&mut self, s: &str) -> bool {
        let matched = self.text[self.pos..].starts_with(s);
        if matched {
            self.pos += s.len();
        }
        matched
    }
}

/// `and`, `Or`, `not`…: Google's operators are upper case only, and a
/// lower-case one is worth naming rather than reporting as a stray word.
fn is_lower_case_operator(word: &str) -> bool {
    ["AND", "OR", "NOT"]
        .iter()
        .any(|op| word != *op && word.eq_ignore_ascii_case(op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn matches(filter: &str, pairs: &[(&str, &str)]) -> bool {
        Filter::parse(filter)
            .unwrap_or_else(|reason| panic!("{filter:?}: {reason}"))
            .matches(&attrs(pairs))
    }

    fn reason(filter: &str) -> String {
        match Filter::parse(filter) {
            Ok(parsed) => panic!("{filter:?} parsed as {parsed:?}"),
            Err(reason) => reason,
        }
    }

    #[test]
    fn an_empty_or_blank_filter_matches_everything() {
        for blank in ["", " ", "\t\r\n "] {
            assert!(matches(blank, &[]), "{blank:?}");
            assert!(matches(blank, &[("k", "v")]), "{blank:?}");
        }
    }

    #[test]
    fn has_tests_the_key_whatever_its_value() {
        assert!(matches("attributes:name", &[("name", "com")]));
        assert!(matches("attributes:name", &[("name", "")]));
        assert!(!matches("attributes:name", &[]));
        assert!(!matches("attributes:name", &[("Name", "com")]));
        assert!(!matches("attributes:name", &[("other", "name")]));
    }

    #[test]
    fn equals_needs_the_key_and_the_exact_value() {
        let f = r#"attributes.name = "com""#;
        assert!(matches(f, &[("name", "com")]));
        assert!(!matches(f, &[("name", "Com")]));
        assert!(!matches(f, &[("name", "com ")]));
        assert!(!matches(f, &[("name", "")]));
        assert!(!matches(f, &[]));
        assert!(matches(r#"attributes.name = """#, &[("name", "")]));
        assert!(!matches(r#"attributes.name = """#, &[]));
    }

    #[test]
    fn not_equals_is_true_when_the_key_is_absent() {
        // Google's table: every message but those with name = com.
        let f = r#"attributes.name != "com""#;
        assert!(!matches(f, &[("name", "com")]));
        assert!(matches(f, &[("name", "org")]));
        assert!(matches(f, &[("name", "")]));
        assert!(matches(f, &[]));
        assert!(matches(f, &[("other", "com")]));
        assert_eq!(
            Filter::parse(f),
            Filter::parse(r#"NOT attributes.name = "com""#)
        );
    }

    #[test]
    fn has_prefix_needs_the_key_and_a_value_starting_with_the_prefix() {
        let f = r#"hasPrefix(attributes.name, "co")"#;
        assert!(matches(f, &[("name", "com")]));
        assert!(matches(f, &[("name", "co")]));
        assert!(!matches(f, &[("name", "c")]));
        assert!(!matches(f, &[("name", "xco")]));
        assert!(!matches(f, &[("name", "Com")]));
        assert!(!matches(f, &[]));
        assert!(matches(r#"hasPrefix(attributes.k, "")"#, &[("k", "")]));
        assert!(!matches(r#"hasPrefix(attributes.k, "")"#, &[]));
        assert!(matches(r#"hasPrefix(attributes.k, "é")"#, &[("k", "été")]));
        // NOT hasPrefix, per Google's table: true when the key is absent.
        assert!(matches(r#"NOT hasPrefix(attributes.name, "co")"#, &[]));
    }

    #[test]
    fn not_and_minus_negate_one_term() {
        for f in ["NOT attributes:k", "-attributes:k", "NOT\tattributes:k"] {
            assert!(matches(f, &[]), "{f}");
            assert!(!matches(f, &[("k", "")]), "{f}");
        }
        assert!(matches(r#"-attributes.k = "v""#, &[("k", "w")]));
        assert!(!matches(r#"-attributes.k = "v""#, &[("k", "v")]));
        assert!(matches(r#"-hasPrefix(attributes.k, "v")"#, &[("k", "w")]));
        assert!(matches("NOT (attributes:a OR attributes:b)", &[("c", "")]));
        assert!(!matches("NOT (attributes:a OR attributes:b)", &[("b", "")]));
        assert!(matches("-(attributes:a AND attributes:b)", &[("a", "")]));
        assert!(!matches(
            "-(attributes:a AND attributes:b)",
            &[("a", ""), ("b", "")]
        ));
    }

    #[test]
    fn a_second_negation_needs_parentheses() {
        // AIP-160: term = [NOT WS | MINUS] simple; a simple is not a term.
        for f in [
            "NOT NOT attributes:k",
            "--attributes:k",
            "NOT -attributes:k",
            "-NOT attributes:k",
        ] {
            assert!(reason(f).contains("parentheses"), "{f}: {}", reason(f));
        }
        assert!(matches("NOT (NOT attributes:k)", &[("k", "")]));
        assert!(matches("-(-attributes:k)", &[("k", "")]));
        assert!(!matches("-(NOT attributes:k)", &[]));
    }

    #[test]
    fn and_needs_every_term_and_or_any() {
        let and = "attributes:a AND attributes:b AND attributes:c";
        let or = "attributes:a OR attributes:b OR attributes:c";
        assert!(matches(and, &[("a", ""), ("b", ""), ("c", "")]));
        assert!(!matches(and, &[("a", ""), ("b", "")]));
        assert!(!matches(and, &[]));
        assert!(matches(or, &[("c", "")]));
        assert!(matches(or, &[("a", ""), ("b", "")]));
        assert!(!matches(or, &[("d", "")]));
    }

    #[test]
    fn not_binds_tighter_than_and_and_or() {
        // (NOT a) AND b, not NOT (a AND b).
        let f = "NOT attributes:a AND attributes:b";
        assert!(matches(f, &[("b", "")]));
        assert!(!matches(f, &[("a", ""), ("b", "")]));
        assert!(!matches(f, &[]));
        // (-a) OR b, not -(a OR b).
        let f = "-attributes:a OR attributes:b";
        assert!(matches(f, &[]));
        assert!(matches(f, &[("a", ""), ("b", "")]));
        assert!(!matches(f, &[("a", "")]));
    }

    #[test]
    fn parentheses_group_and_let_and_and_or_mix() {
        let right = "attributes:a AND (attributes:b OR attributes:c)";
        let left = "(attributes:a AND attributes:b) OR attributes:c";
        assert!(!matches(right, &[("c", "")]));
        assert!(matches(left, &[("c", "")]));
        assert!(matches(right, &[("a", ""), ("c", "")]));
        assert!(matches(left, &[("a", ""), ("b", "")]));
        assert!(matches("((attributes:a))", &[("a", "")]));
        assert!(matches("( attributes:a )", &[("a", "")]));
        assert!(matches(
            "(attributes:a OR attributes:b) AND (attributes:c OR attributes:d)",
            &[("b", ""), ("c", "")]
        ));
    }

    #[test]
    fn and_and_or_do_not_mix_without_parentheses() {
        for f in [
            "attributes:a AND attributes:b OR attributes:c",
            "attributes:a OR attributes:b AND attributes:c",
            "NOT attributes:a AND attributes:b OR -attributes:c",
            "(attributes:a AND attributes:b OR attributes:c)",
            "attributes:a AND (attributes:b) OR (attributes:c)",
        ] {
            assert!(reason(f).contains("mix only with parentheses"), "{f}");
        }
        assert_eq!(
            reason("attributes:a AND attributes:b OR attributes:c"),
            "OR at byte 30 follows AND at byte 13: AND and OR mix only with parentheses, \
             as in a AND (b OR c)"
        );
    }

    #[test]
    fn the_examples_of_googles_page_parse_or_fail_as_it_says() {
        for valid in [
            "attributes:name",
            "NOT attributes:name",
            r#"attributes.name = "com""#,
            r#"attributes.name != "com""#,
            r#"hasPrefix(attributes.name, "co")"#,
            r#"NOT hasPrefix(attributes.name, "co")"#,
            r#"attributes."iana.org/language_tag" = "en""#,
            r#"attributes:"\u307F\u3093\u306A""#,
            r#"attributes:"iana.org/language_tag" AND NOT attributes.name = "com""#,
            r#"attributes:"iana.org/language_tag" AND (attributes.name = "net" OR attributes.name = "org")"#,
            r#"attributes.name = "com" AND -attributes:"iana.org/language_tag""#,
            r#"attributes.is-even = "false""#,
            r#"attributes.author="unknown""#,
        ] {
            assert!(
                Filter::parse(valid).is_ok(),
                "{valid}: {:?}",
                Filter::parse(valid)
            );
        }
        for invalid in [
            r#""com" = attributes.name"#,
            "attributes.name = attributes.website",
            r"attributes:\u307F\u3093\u306A",
            r#"attributes:"iana.org/language_tag" AND attributes.name = "net" OR attributes.name = "org""#,
            r#"attributes.name = "com" AND ("net" OR "org")"#,
        ] {
            assert!(Filter::parse(invalid).is_err(), "{invalid}");
        }
        assert!(matches(
            r#"attributes:"iana.org/language_tag" AND NOT attributes.name = "com""#,
            &[("iana.org/language_tag", "en"), ("name", "net")]
        ));
        assert!(matches(
            r#"attributes:"\u307F\u3093\u306A""#,
            &[("みんな", "")]
        ));
    }

    #[test]
    fn keys_are_bare_names_or_quoted_strings() {
        for (f, key) in [
            ("attributes:my-key_2", "my-key_2"),
            ("attributes:2fa", "2fa"),
            ("attributes:-lead", "-lead"),
            ("attributes:AND", "AND"),
            ("attributes:NOT", "NOT"),
            (r#"attributes:"my key""#, "my key"),
            (r#"attributes:"a.b/c:d""#, "a.b/c:d"),
            (r#"attributes:"""#, ""),
            (r#"attributes:"été""#, "été"),
        ] {
            assert!(matches(f, &[(key, "")]), "{f}");
            assert!(!matches(f, &[("other", "")]), "{f}");
        }
        assert!(matches(r#"attributes.OR = "x""#, &[("OR", "x")]));
        assert!(matches(r#"attributes."my key" != "x""#, &[("my key", "y")]));
        assert!(matches(
            r#"hasPrefix(attributes."my key", "x")"#,
            &[("my key", "xy")]
        ));
        // Keys with other characters need quotes, and the reason says so.
        for f in [
            r#"attributes.iana.org = "en""#,
            "attributes:café",
            "attributes:a/b",
            r#"hasPrefix(attributes.a.b, "x")"#,
        ] {
            assert!(reason(f).contains("quote a key"), "{f}: {}", reason(f));
        }
        assert!(reason("attributes:é").contains("or a quoted string"));
    }

    #[test]
    fn strings_take_the_escapes_of_cel() {
        for (escaped, text) in [
            (r#"\"q\""#, "\"q\""),
            (r"back\\slash", "back\\slash"),
            (r"\a\b\f\n\r\t\v", "\u{7}\u{8}\u{c}\n\r\t\u{b}"),
            (r"\'\`\?", "'`?"),
            (r"\x41\X42", "AB"),
            (r"\xE9", "é"),
            (r"\101\000\377", "A\0\u{ff}"),
            (r"\u00e9\u307F", "éみ"),
            (r"\U0001F600", "😀"),
            ("raw é and 😀", "raw é and 😀"),
        ] {
            let f = format!("attributes.k = \"{escaped}\"");
            assert!(matches(&f, &[("k", text)]), "{f}");
            let key = format!("attributes:\"{escaped}\"");
            assert!(matches(&key, &[(text, "")]), "{key}");
        }
    }

    #[test]
    fn malformed_escapes_are_refused_with_their_place() {
        for (f, expected) in [
            (r#"attributes.k = "\q""#, r"unknown escape '\q' at byte 16"),
            (
                r#"attributes.k = "\x4""#,
                "the escape at byte 16 needs 2 hex digits",
            ),
            (
                r#"attributes.k = "\xG1""#,
                "the escape at byte 16 needs 2 hex digits",
            ),
            (
                r#"attributes.k = "\u12""#,
                "the escape at byte 16 needs 4 hex digits",
            ),
            (
                r#"attributes.k = "\u+123""#,
                "the escape at byte 16 needs 4 hex digits",
            ),
            (
                r#"attributes.k = "\uD800""#,
                "the escape at byte 16 is not a Unicode scalar value",
            ),
            (
                r#"attributes.k = "\U00110000""#,
                "the escape at byte 16 is not a Unicode scalar value",
            ),
            (
                r#"attributes.k = "\12""#,
                "the escape at byte 16 needs 3 octal digits",
            ),
            (
                r#"attributes.k = "\400""#,
                r"the octal escape at byte 16 is over \377",
            ),
            (r#"attributes.k = "\8""#, r"unknown escape '\8' at byte 16"),
            (
                r#"attributes.k = "\u00é9""#,
                "the escape at byte 16 needs 4 hex digits",
            ),
            (
                r#"attributes.k = "\"#,
                "the string opened at byte 15 is not closed",
            ),
        ] {
            assert_eq!(reason(f), expected, "{f}");
        }
    }

    #[test]
    fn whitespace_goes_around_comparators_not_inside_names() {
        for f in [
            r#"attributes.k="v""#,
            "attributes.k\t=\n\"v\"",
            r#"attributes.k  !=  "w""#,
            "attributes : k",
            r#"hasPrefix( attributes.k , "v" )"#,
            " \n attributes:k \r\n",
            "attributes:k\tAND\nattributes.k = \"v\"",
        ] {
            assert!(matches(f, &[("k", "v")]), "{f}");
        }
        for (f, expected) in [
            (
                "attributes .k = \"v\"",
                "expected '.' (with no space before it) or ':' after attributes at byte 11, \
                 found '.'",
            ),
            (
                "attributes. k = \"v\"",
                "expected an attribute key (letters, digits, '_' and '-', or a quoted string) \
                 at byte 11, found ' '",
            ),
            (
                r#"hasPrefix (attributes.k, "v")"#,
                "expected '(' right after hasPrefix at byte 9, found ' '",
            ),
            (
                "NOT(attributes:k)",
                "expected whitespace after NOT at byte 3, found '('",
            ),
            (
                "- attributes:k",
                "expected a condition right after '-' at byte 1, found ' '",
            ),
            (
                r#"attributes.k = "v"AND attributes:k"#,
                "expected whitespace before AND at byte 18",
            ),
            (
                "attributes:k AND(attributes:k)",
                "expected whitespace after AND at byte 16, found '('",
            ),
        ] {
            assert_eq!(reason(f), expected, "{f}");
        }
    }

    #[test]
    fn operators_are_upper_case() {
        for (f, expected) in [
            (
                "attributes:a and attributes:b",
                "operators are upper case: found 'and' at byte 13, write AND",
            ),
            (
                "attributes:a Or attributes:b",
                "operators are upper case: found 'Or' at byte 13, write OR",
            ),
            (
                "not attributes:a",
                "operators are upper case: found 'not' at byte 0, write NOT",
            ),
            (
                "(not attributes:a)",
                "operators are upper case: found 'not' at byte 1, write NOT",
            ),
        ] {
            assert_eq!(reason(f), expected, "{f}");
        }
    }

    #[test]
    fn malformed_filters_say_what_was_expected_and_where() {
        for (f, expected) in [
            (
                "attributes.k = x",
                "expected a string after '=' at byte 15, found 'x'",
            ),
            (
                "attributes.k != ",
                "expected a string after '!=' at byte 16, found the end of the filter",
            ),
            (
                "attributes.k = 'v'",
                "expected a string after '=' at byte 15, found \"'\" (strings take double quotes)",
            ),
            (
                "attributes.name = attributes.website",
                "expected a string after '=' at byte 18, found 'attributes'",
            ),
            (
                "attributes",
                "expected '.' (with no space before it) or ':' after attributes at byte 10, \
                 found the end of the filter",
            ),
            (
                "attributes.k",
                "expected '=' or '!=' at byte 12, found the end of the filter",
            ),
            (
                "attributes.k == \"v\"",
                "expected a string after '=' at byte 14, found '='",
            ),
            (
                "attributes.k = \"v",
                "the string opened at byte 15 is not closed",
            ),
            (
                "attributes.k = \"a\nb\"",
                "unescaped control character \\n at byte 17 in a string; write it as an \
                 escape such as \\n or \\u0007",
            ),
            (
                "(attributes:a",
                "expected AND, OR or ')' at byte 13, found the end of the filter (the '(' at \
                 byte 0 is not closed)",
            ),
            ("attributes:a)", "unmatched ')' at byte 12"),
            ("()", "expected a condition or '(' at byte 1, found ')'"),
            (
                "attributes:a attributes:b",
                "expected AND, OR or the end of the filter at byte 13, found 'attributes'",
            ),
            (
                "attributes:a AND",
                "expected a condition after AND at byte 16, found the end of the filter",
            ),
            (
                "attributes:a OR ",
                "expected a condition after OR at byte 16, found the end of the filter",
            ),
            (
                "NOT ",
                "expected a condition after NOT at byte 4, found the end of the filter",
            ),
            (
                "-",
                "expected a condition or '(' at byte 1, found the end of the filter",
            ),
            (
                "attributes:k = \"v\"",
                "expected AND, OR or the end of the filter at byte 13, found '='",
            ),
            (
                "Attributes:k",
                "expected a condition or '(' at byte 0, found 'Attributes'",
            ),
            (
                r#""com" = attributes.name"#,
                "expected a condition or '(' at byte 0, found '\"': the key goes on the left, \
                 as in attributes.KEY = \"VALUE\"",
            ),
            (
                r#"hasSuffix(attributes.k, "x")"#,
                "unknown function 'hasSuffix' at byte 0: hasPrefix is the only one",
            ),
            (
                r#"hasPrefix(attributes:k, "x")"#,
                "expected attributes.KEY as hasPrefix's first argument at byte 10, found \
                 'attributes'",
            ),
            (
                "hasPrefix(attributes.k)",
                "expected ',' after hasPrefix's key at byte 22, found ')'",
            ),
            (
                "hasPrefix(attributes.k, x)",
                "expected a string as hasPrefix's second argument at byte 24, found 'x'",
            ),
            (
                r#"hasPrefix(attributes.k, "x""#,
                "expected ')' closing hasPrefix at byte 27, found the end of the filter",
            ),
            (
                r#"hasPrefix(attributes.k, "x", "y")"#,
                "expected ')' closing hasPrefix at byte 27, found ','",
            ),
            (
                "attributes:a # comment",
                "expected AND, OR or the end of the filter at byte 13, found '#'",
            ),
        ] {
            assert_eq!(reason(f), expected, "{f}");
        }
    }

    /// `attributes:"aaa…"` padded to exactly `len` bytes.
    fn filter_of_len(len: usize) -> String {
        let frame = r#"attributes:"""#.len();
        format!("attributes:\"{}\"", "a".repeat(len - frame))
    }

    #[test]
    fn the_limit_is_256_bytes_not_characters() {
        let at_limit = filter_of_len(256);
        assert_eq!(at_limit.len(), 256);
        assert!(Filter::parse(&at_limit).is_ok());
        assert_eq!(
            reason(&filter_of_len(257)),
            "the filter is 257 bytes; the limit is 256"
        );
        // 'é' is two bytes: 134 characters but 257 bytes is over.
        let key = format!("a{}", "é".repeat(121));
        let at_limit = format!("attributes:\"{key}\"");
        assert_eq!(at_limit.len(), 256);
        assert!(matches(&at_limit, &[(&key, "")]));
        let over = format!("attributes:\"{key}é\"");
        assert!(over.chars().count() < 256);
        assert_eq!(reason(&over), "the filter is 258 bytes; the limit is 256");
        // Whitespace counts too.
        assert!(Filter::parse(&" ".repeat(256)).is_ok());
        assert!(Filter::parse(&" ".repeat(257)).is_err());
    }

    #[test]
    fn the_deepest_nesting_that_fits_parses_and_matches() {
        let core = "attributes:a";
        let depth = (MAX_BYTES - core.len()) / 2;
        let deep = format!("{}{core}{}", "(".repeat(depth), ")".repeat(depth));
        assert!(deep.len() <= MAX_BYTES);
        assert!(matches(&deep, &[("a", "")]));
        let depth = (MAX_BYTES - core.len()) / 3;
        let negations = format!("{}{core}{}", "-(".repeat(depth), ")".repeat(depth));
        assert!(negations.len() <= MAX_BYTES);
        // An even number of negations cancels out.
        assert_eq!(matches(&negations, &[("a", "")]), depth.is_multiple_of(2));
    }

    #[test]
    fn parsing_is_deterministic_and_clone_equal() {
        let text = r#"attributes:a AND (hasPrefix(attributes.b, "x") OR -attributes.c = "y")"#;
        let filter = Filter::parse(text).unwrap();
        assert_eq!(filter, Filter::parse(text).unwrap());
        assert_eq!(filter.clone(), filter);
        assert_ne!(filter, Filter::parse("attributes:a").unwrap());
    }

    // Random filters: an expression tree, its text, and the tree parsed back.

    fn any_key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9_-]{1,4}",
            prop::sample::select(vec!["a", "b", "my key", "é", "q\"\\", "", "\n", "AND"])
                .prop_map(str::to_owned),
        ]
    }

    fn any_value() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["", "v", "va", "x", "\"", "\\", "é", "\t"])
            .prop_map(str::to_owned)
    }

    fn any_expr() -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            any_key().prop_map(Expr::Has),
            (any_key(), any_value()).prop_map(|(key, value)| Expr::Equals { key, value }),
            (any_key(), any_value()).prop_map(|(key, prefix)| Expr::HasPrefix { key, prefix }),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
                prop::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
                prop::collection::vec(inner, 2..4).prop_map(Expr::Or),
            ]
        })
    }

    fn any_attributes() -> impl Strategy<Value = HashMap<String, String>> {
        prop::collection::hash_map(any_key(), any_value(), 0..4)
    }

    fn quoted(text: &str) -> String {
        let mut out = String::from("\"");
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    fn key_text(key: &str) -> String {
        let bare = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if bare { key.to_owned() } else { quoted(key) }
    }

    /// Every child in parentheses, so the text means exactly the tree.
    fn render(expr: &Expr, flip: bool) -> String {
        let join = |terms: &[Expr], op: &str| {
            terms
                .iter()
                .map(|t| format!("({})", render(t, !flip)))
                .collect::<Vec<_>>()
                .join(op)
        };
        match expr {
            Expr::Has(key) => format!("attributes:{}", key_text(key)),
            Expr::Equals { key, value } => {
                format!("attributes.{} = {}", key_text(key), quoted(value))
            }
            Expr::HasPrefix { key, prefix } => {
                format!(
                    "hasPrefix(attributes.{}, {})",
                    key_text(key),
                    quoted(prefix)
                )
            }
            Expr::Not(inner) if flip => format!("-({})", render(inner, !flip)),
            Expr::Not(inner) => format!("NOT ({})", render(inner, !flip)),
            Expr::And(terms) => join(terms, " AND "),
            Expr::Or(terms) => join(terms, " OR "),
        }
    }

    const TOKENS: &[&str] = &[
        "attributes",
        ".",
        ":",
        "k",
        "my-key",
        "\"v\"",
        "\"",
        "\\",
        "\\u",
        "\\x4",
        "=",
        "!=",
        "!",
        "AND",
        "OR",
        "NOT",
        "and",
        "-",
        "(",
        ")",
        " ",
        "\t",
        "hasPrefix",
        "hasPrefix(",
        ",",
        "é",
        "\u{0}",
        "'",
        "\\U0010FFFF",
        "\\377",
    ];

    proptest! {
        #[test]
        fn a_rendered_tree_parses_back_to_itself(
            expr in any_expr(),
            flip in any::<bool>(),
            attributes in any_attributes(),
        ) {
            let text = render(&expr, flip);
            prop_assume!(text.len() <= MAX_BYTES);
            let filter = Filter::parse(&text).map_err(|r| TestCaseError::fail(format!("{text}: {r}")))?;
            prop_assert_eq!(&filter, &Filter { expr: Some(expr.clone()) }, "{}", text);
            prop_assert_eq!(filter.matches(&attributes), expr.matches(&attributes));
        }

        #[test]
        fn any_text_parses_or_is_refused_without_panicking(
            text in ".{0,200}",
            attributes in any_attributes(),
        ) {
            if let Ok(filter) = Filter::parse(&text) {
                prop_assert!(text.len() <= MAX_BYTES);
                let _ = filter.matches(&attributes);
            }
        }

        #[test]
        fn any_bytes_parse_or_are_refused_without_panicking(
            bytes in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let _ = Filter::parse(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn any_soup_of_tokens_parses_or_is_refused_without_panicking(
            tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..40),
            attributes in any_attributes(),
        ) {
            let text = tokens.concat();
            match Filter::parse(&text) {
                Ok(filter) => {
                    let _ = filter.matches(&attributes);
                }
                Err(reason) => prop_assert!(!reason.is_empty()),
            }
        }
    }
}

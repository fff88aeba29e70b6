//! A flag value that must not reach a log, such as a token or a URL that
//! may hold a password.

use std::convert::Infallible;
use std::str::FromStr;

/// A secret from a flag or its variable: `Debug` shows `<redacted>`, so the
/// arguments that hold one can derive `Debug`. (`hide_env_values` on its
/// flag keeps it out of `--help` too.)
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// The value itself, for where it is used rather than shown.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for Secret {
    type Err = Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value() {
        let secret: Secret = "redis://:hunter2@redis:6379".parse().unwrap();
        assert_eq!(format!("{secret:?}"), "<redacted>");
        assert_eq!(secret.expose(), "redis://:hunter2@redis:6379");
    }
}

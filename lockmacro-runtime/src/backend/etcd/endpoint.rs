//! A member's URL as given: `http://`, `https://` or a bare `host:port`,
//! with an optional `user:password@`.

use percent_encoding::percent_decode_str;

use super::config::Credentials;
use crate::LockError;
use crate::backend::redact;

/// One member, as the client dials it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// `http://host:port` or `https://host:port`, without credentials.
    pub(super) url: String,
    /// `host:port`, for errors.
    pub(super) name: String,
    pub(super) tls: bool,
    /// The user of the URL, if it names one.
    pub(super) user: Option<Credentials>,
}

fn invalid(given: &str, reason: impl Into<String>) -> LockError {
    LockError::InvalidUrl {
        url: redact(given),
        reason: reason.into(),
    }
}

/// Reads `given`; `tls` is whether the config has TLS settings, which make
/// a bare `host:port` a TLS member and forbid `http://`.
pub(super) fn parse(given: &str, tls: bool) -> Result<Endpoint, LockError> {
    let (secure, rest) = match given.split_once("://") {
        Some(("http", _)) if tls => {
            return Err(invalid(
                given,
                "an `http://` member with TLS settings in the `EtcdConfig`: write `https://` \
                 (it would be reached without TLS)",
            ));
        }
        Some(("http", rest)) => (false, rest),
        Some(("https", rest)) => (true, rest),
        Some((scheme, _)) => {
            return Err(invalid(
                given,
                format!(
                    "unknown scheme `{scheme}://`: an etcd member is `http://host:port` or `https://host:port`"
                ),
            ));
        }
        None => (tls, given),
    };
    if secure && !cfg!(feature = "tls-rustls") {
        return Err(invalid(
            given,
            "`https://` needs the `tls-rustls` feature of `lockmacro-runtime`",
        ));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !path.is_empty() {
        return Err(invalid(
            given,
            "an etcd member's URL has no path: `http://host:port`",
        ));
    }
    let (user, name) = match authority.rsplit_once('@') {
        Some((userinfo, name)) => (Some(credentials(given, userinfo)?), name),
        None => (None, authority),
    };
    if name.is_empty() {
        return Err(invalid(given, "no host: `http://host:port`"));
    }
    let scheme = if secure { "https" } else { "http" };
    Ok(Endpoint {
        url: format!("{scheme}://{name}"),
        name: name.to_owned(),
        tls: secure,
        user,
    })
}

fn credentials(given: &str, userinfo: &str) -> Result<Credentials, LockError> {
    let decode = |part: &str| {
        percent_decode_str(part)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|_| invalid(given, "the user or password is not UTF-8 once decoded"))
    };
    let Some((user, password)) = userinfo.split_once(':') else {
        return Err(invalid(
            given,
            "a user without a password: `http://user:password@host:port`",
        ));
    };
    let user = decode(user)?;
    if user.is_empty() {
        return Err(invalid(
            given,
            "a password without a user: `http://user:password@host:port`",
        ));
    }
    Ok(Credentials {
        user,
        password: decode(password)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(user: &str, password: &str) -> Option<Credentials> {
        Some(Credentials {
            user: user.into(),
            password: password.into(),
        })
    }

    #[test]
    fn schemes_choose_tls_and_bare_members_follow_the_config() {
        let plain = parse("http://127.0.0.1:2379/", false).unwrap();
        assert_eq!(plain.url, "http://127.0.0.1:2379");
        assert_eq!(plain.name, "127.0.0.1:2379");
        assert!(!plain.tls);
        assert!(!parse("127.0.0.1:2379", false).unwrap().tls);
        if cfg!(feature = "tls-rustls") {
            let secure = parse("https://etcd.internal:2379", false).unwrap();
            assert_eq!(secure.url, "https://etcd.internal:2379");
            assert!(secure.tls);
            let bare = parse("etcd.internal:2379", true).unwrap();
            assert_eq!(bare.url, "https://etcd.internal:2379");
        } else {
            assert!(parse("https://etcd.internal:2379", false).is_err());
        }
    }

    #[test]
    fn credentials_are_decoded_and_kept_out_of_the_url() {
        let member = parse("http://app:p%40ss%3Aword@127.0.0.1:2379", false).unwrap();
        assert_eq!(member.user, user("app", "p@ss:word"));
        assert_eq!(member.url, "http://127.0.0.1:2379");
        assert_eq!(member.name, "127.0.0.1:2379");
    }

    #[test]
    fn bad_urls_are_refused_without_their_password() {
        for (given, tls, reason) in [
            ("http://127.0.0.1:2379", true, "TLS settings"),
            ("redis://127.0.0.1:2379", false, "unknown scheme"),
            ("http://127.0.0.1:2379/v3", false, "no path"),
            ("http://app@127.0.0.1:2379", false, "without a password"),
            ("http://:secret@127.0.0.1:2379", false, "without a user"),
            ("http://app:secret@", false, "no host"),
        ] {
            let Err(LockError::InvalidUrl { url, reason: got }) = parse(given, tls) else {
                panic!("{given} was accepted");
            };
            assert!(got.contains(reason), "{given}: {got}");
            assert!(!url.contains("secret"), "{url}");
        }
    }
}

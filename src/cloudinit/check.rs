//! Checks on every value the payload carries (seed 000 §9 substitutions). Values end up inside
//! shell env files, systemd units and YAML, so each one is held to a narrow alphabet instead of
//! being escaped three ways; a value outside it is refused with the field's name (and never
//! the value itself when it is secret).

use super::CloudInitError;

/// `<lower-case-words>`: a stand-in the CLI prints where a value does not exist yet (the
/// enrollment token before deploy, the system id before the machine is found). Accepted for
/// the fields that document it; never produced by the executor.
pub fn is_placeholder(value: &str) -> bool {
    value.len() > 2
        && value.starts_with('<')
        && value.ends_with('>')
        && value[1..value.len() - 1]
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '-' || c == ' ' || c == ':')
}

fn invalid(field: &'static str, reason: impl Into<String>) -> CloudInitError {
    CloudInitError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// `Ok` when `ok`, else the field's error with `reason`.
fn require<R: Into<String>>(
    ok: bool,
    field: &'static str,
    reason: impl FnOnce() -> R,
) -> Result<(), CloudInitError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(field, reason()))
    }
}

/// A value shown in an error message: short and printable.
fn shown(value: &str) -> String {
    let mut s: String = value.chars().take(80).collect();
    if value.chars().count() > 80 {
        s.push('…');
    }
    format!("{s:?}")
}

/// An RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
pub fn hostname(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if value.is_empty() || value.len() > 253 || !value.split('.').all(label_ok) {
        return Err(invalid(
            field,
            format!(
                "{} is not a host name (letters, digits and inner hyphens, dot-separated)",
                shown(value)
            ),
        ));
    }
    Ok(())
}

/// Letters, digits, `-` and `_` (MAAS system ids, enrollment tokens).
fn word(value: &str, max: usize) -> bool {
    !value.is_empty()
        && value.len() <= max
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

pub fn system_id(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    if word(value, 64) || is_placeholder(value) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!(
                "{} is not a MAAS system id (letters, digits, - and _)",
                shown(value)
            ),
        ))
    }
}

/// The enrollment token: URL-safe base64 as the store issues it. Never echoed.
pub fn token(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    if (value.len() >= 16 && word(value, 512)) || is_placeholder(value) {
        Ok(())
    } else {
        Err(invalid(
            field,
            "must be 16 to 512 characters of URL-safe base64 (A-Z a-z 0-9 - _)",
        ))
    }
}

/// An absolute http(s) URL without credentials, printable ASCII without quotes, `$`, `` ` ``,
/// `\` or spaces (it lands in shell env files and systemd units).
pub fn url(field: &'static str, value: &str, placeholder_ok: bool) -> Result<(), CloudInitError> {
    if placeholder_ok && is_placeholder(value) {
        return Ok(());
    }
    let parsed = url::Url::parse(value)
        .map_err(|e| invalid(field, format!("{} is not a URL: {e}", shown(value))))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(invalid(
            field,
            format!("{} must be an http:// or https:// URL", shown(value)),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(
            field,
            "must not carry a user or password (the payload is readable on the host)",
        ));
    }
    if !value.chars().all(|c| c.is_ascii_graphic()) || value.contains(['"', '\'', '$', '`', '\\']) {
        return Err(invalid(
            field,
            format!(
                "{} has characters the payload cannot carry (spaces, quotes, $, `, \\)",
                shown(value)
            ),
        ));
    }
    Ok(())
}

/// A site bundle reference: an http(s) URL or a relative path of `A-Z a-z 0-9 . _ - /`
/// without `..`.
pub fn bundle_reference(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    if value.starts_with("http://") || value.starts_with("https://") {
        return url(field, value, false);
    }
    let ok = !value.is_empty()
        && value.len() <= 255
        && !value.starts_with('/')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        && !value
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..");
    require(ok, field, || {
        format!(
            "{} is neither an http(s) URL nor a relative path (A-Z a-z 0-9 . _ - /, no ..)",
            shown(value)
        )
    })
}

/// A version label: letters, digits, `.`, `_`, `-`.
pub fn version(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !value.starts_with('.');
    require(ok, field, || {
        format!(
            "{} is not a version label (A-Z a-z 0-9 . _ -)",
            shown(value)
        )
    })
}

/// A device path such as `/dev/disk/by-id/ata-Dell_BOSS-N1_S1`.
pub fn device_path(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    let ok = value.starts_with("/dev/")
        && value.len() <= 255
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | ':' | '+'))
        && !value.split('/').any(|s| s == "..");
    require(ok, field, || {
        format!("{} is not a /dev/ path", shown(value))
    })
}

/// A Linux interface name: 1–15 characters, no `/`, whitespace or `:`.
pub fn interface(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    let ok = !value.is_empty()
        && value.len() <= 15
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && value != "."
        && value != "..";
    require(ok, field, || {
        format!(
            "{} is not an interface name (1-15 of A-Z a-z 0-9 . _ -)",
            shown(value)
        )
    })
}

/// A login name as `useradd` accepts it by default; not `root`.
pub fn user_name(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    let ok = value.len() <= 32
        && value
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !ok {
        return Err(invalid(
            field,
            format!(
                "{} is not a login name (a-z, 0-9, _ and -, starting with a letter or _)",
                shown(value)
            ),
        ));
    }
    if value == "root" {
        return Err(invalid(field, "the deploy user cannot be root"));
    }
    Ok(())
}

/// An OpenSSH public key line: a key type, base64, an optional comment; one printable line.
pub fn ssh_key(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    const TYPES: &[&str] = &[
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    ];
    let mut parts = value.splitn(3, ' ');
    let kind = parts.next().unwrap_or_default();
    let body = parts.next().unwrap_or_default();
    let ok = value.len() <= 16_384
        && !value.chars().any(char::is_control)
        && TYPES.contains(&kind)
        && !body.is_empty()
        && body
            .trim_end_matches('=')
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            "is not an OpenSSH public key line (type, base64 key, optional comment)",
        ))
    }
}

/// PEM certificates: printable text holding at least one certificate block.
pub fn ca_bundle(field: &'static str, value: &str) -> Result<(), CloudInitError> {
    let ok = value.contains("-----BEGIN CERTIFICATE-----")
        && value.contains("-----END CERTIFICATE-----")
        && value.len() <= 256 * 1024
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() || matches!(c, ' ' | '\n' | '\r' | '\t'));
    require(
        ok,
        field,
        || "must be PEM text with at least one -----BEGIN CERTIFICATE----- block (at most 256 KiB)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_angle_bracketed_words() {
        assert!(is_placeholder("<system-id>"));
        assert!(is_placeholder("<enrollment-token: issued at deploy>"));
        assert!(!is_placeholder("<>"));
        assert!(!is_placeholder("<Token>"));
        assert!(!is_placeholder("<a\"b>"));
    }

    #[test]
    fn each_check_names_the_field_and_why() {
        let msg = |r: Result<(), CloudInitError>| r.unwrap_err().to_string();
        assert_eq!(
            msg(hostname("hostname", "c07_u43")),
            "cloud-init input `hostname` is invalid: \"c07_u43\" is not a host name (letters, digits and inner hyphens, dot-separated)"
        );
        assert!(hostname("hostname", "c07u43").is_ok());
        assert!(hostname("hostname", "-c07").is_err());
        assert_eq!(
            msg(url("agent.enroll_url", "ftp://x/enroll", false)),
            "cloud-init input `agent.enroll_url` is invalid: \"ftp://x/enroll\" must be an http:// or https:// URL"
        );
        assert!(
            url("u", "http://u:p@x/", false)
                .unwrap_err()
                .to_string()
                .contains("user or password")
        );
        assert!(url("u", "http://x/a$b", false).is_err());
        assert!(url("u", "<enroll-url>", true).is_ok());
        assert!(url("u", "<enroll-url>", false).is_err());
        // The token is secret: the message never repeats it.
        let secret = "short\"secret";
        let m = msg(token("agent.enroll_token", secret));
        assert!(!m.contains("secret"), "{m}");
        assert!(token("t", "AbCdEfGhIjKlMnOpQrStUvWxYz012345-_").is_ok());
        assert!(bundle_reference("b", "bundles/dc1-base").is_ok());
        assert!(bundle_reference("b", "https://bundles.example/dc1").is_ok());
        assert!(bundle_reference("b", "../etc").is_err());
        assert!(bundle_reference("b", "/abs").is_err());
        assert!(version("v", "3").is_ok());
        assert!(version("v", "3 beta").is_err());
        assert!(device_path("d", "/dev/disk/by-id/ata-Dell_BOSS-N1_S1").is_ok());
        assert!(device_path("d", "/etc/passwd").is_err());
        assert!(interface("i", "enp28s0np0").is_ok());
        assert!(interface("i", "enp28s0np0-too-long").is_err());
        assert_eq!(
            msg(user_name("deploy_user.name", "root")),
            "cloud-init input `deploy_user.name` is invalid: the deploy user cannot be root"
        );
        assert!(user_name("u", "hpcadmin").is_ok());
        assert!(user_name("u", "HPC").is_err());
        assert!(system_id("s", "x7k3pa").is_ok());
        assert!(system_id("s", "x 7").is_err());
        assert!(
            ca_bundle(
                "c",
                "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n"
            )
            .is_ok()
        );
        assert!(ca_bundle("c", "not pem").is_err());
    }
}

//! TLS to PostgreSQL with libpq's `sslmode` and `sslrootcert`, through the postgres crate's
//! native-tls connector (the system's OpenSSL). The driver knows only `disable`, `prefer`
//! and `require` and rejects `sslrootcert`, so both options are taken out of the URL here
//! and the driver is given the rest, the mode it can do, and a connector that checks what
//! the mode asks for.
use native_tls::{Certificate, TlsConnector};
use postgres::config::SslMode;
use postgres_native_tls::MakeTlsConnector;
use std::path::PathBuf;

/// libpq's `sslmode`, less `allow` (plain first: the driver cannot do it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the certificates that may sign the server's come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Roots {
    /// The system's CA store (no `sslrootcert`, or `sslrootcert=system`).
    System,
    /// Only the certificates of this PEM file.
    File(PathBuf),
}

/// The TLS options of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tls {
    pub mode: Mode,
    /// `Some` when `sslrootcert` was given.
    pub roots: Option<Roots>,
}

const MODES: &str = "disable, prefer, require, verify-ca or verify-full";

/// Takes `sslmode` and `sslrootcert` out of the query of `url` (a later one wins, as in the
/// driver); returns the URL the driver is given and the options. Errors say what is wrong
/// with an option; they name no password (only these two options are quoted).
pub(super) fn split(url: &str) -> Result<(String, Tls), String> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => return Ok((url.to_string(), Tls::default())),
    };
    let mut mode = None;
    let mut root = None;
    let mut rest = Vec::new();
    for option in query.split('&') {
        let (key, value) = option.split_once('=').unwrap_or((option, ""));
        match super::percent_decoded(key).as_str() {
            "sslmode" => mode = Some(super::percent_decoded(value)),
            "sslrootcert" => root = Some(super::percent_decoded(value)),
            _ => rest.push(option),
        }
    }
    let roots = root.map(|r| match r.as_str() {
        "system" => Roots::System,
        _ => Roots::File(PathBuf::from(r)),
    });
    let mode = match mode.as_deref() {
        None if roots == Some(Roots::System) => Mode::VerifyFull,
        None | Some("prefer") => Mode::Prefer,
        Some("disable") => Mode::Disable,
        Some("require") => Mode::Require,
        Some("verify-ca") => Mode::VerifyCa,
        Some("verify-full") => Mode::VerifyFull,
        Some("allow") => {
            return Err(format!(
                "sslmode=allow (plain first, TLS only if the server insists) is not supported: use prefer, or one of {MODES}"
            ))
        }
        Some(other) => return Err(format!("sslmode={other:?} is not one of {MODES}")),
    };
    // As libpq: the system's roots vouch for any public server, so only the host name
    // check makes them mean anything.
    if roots == Some(Roots::System) && mode != Mode::VerifyFull {
        return Err(
            "sslrootcert=system needs sslmode=verify-full (the system's roots vouch for every public server; only the host name check ties the certificate to yours)"
                .into(),
        );
    }
    let driver = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((driver, Tls { mode, roots }))
}

impl Default for Tls {
    fn default() -> Tls {
        Tls {
            mode: Mode::Prefer,
            roots: None,
        }
    }
}

impl Tls {
    /// What the driver does: whether it asks for TLS and whether it may go on without.
    pub fn driver_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// Whether the server's certificate must chain to a trusted root: the verify modes, and
    /// `prefer` or `require` given a root file (libpq checks whenever it has one).
    fn checks_chain(&self) -> bool {
        match self.mode {
            Mode::Disable => false,
            Mode::Prefer | Mode::Require => matches!(self.roots, Some(Roots::File(_))),
            Mode::VerifyCa | Mode::VerifyFull => true,
        }
    }

    /// The connector for this mode; `None` for `disable`. Fails when the root file cannot
    /// be read or holds no certificate.
    pub fn connector(&self) -> Result<Option<MakeTlsConnector>, String> {
        if self.mode == Mode::Disable {
            return Ok(None);
        }
        let mut builder = TlsConnector::builder();
        if !self.checks_chain() {
            // prefer or require without a root file: encrypted, but any certificate will do
            // (libpq), so the system's store need not even be loaded.
            builder
                .danger_accept_invalid_certs(true)
                .disable_built_in_roots(true);
        }
        // The host name is checked by verify-full only.
        builder.danger_accept_invalid_hostnames(self.mode != Mode::VerifyFull);
        if let (true, Some(Roots::File(path))) = (self.checks_chain(), &self.roots) {
            let pem = std::fs::read(path)
                .map_err(|e| format!("sslrootcert {}: cannot read it: {e}", path.display()))?;
            let certs = Certificate::stack_from_pem(&pem).map_err(|e| {
                format!(
                    "sslrootcert {}: not a PEM certificate file: {e}",
                    path.display()
                )
            })?;
            if certs.is_empty() {
                return Err(format!(
                    "sslrootcert {}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                    path.display()
                ));
            }
            // Only this file's roots, as libpq: not the system's besides.
            builder.disable_built_in_roots(true);
            for c in certs {
                builder.add_root_certificate(c);
            }
        }
        let connector = builder
            .build()
            .map_err(|e| format!("cannot set up TLS: {e}"))?;
        Ok(Some(MakeTlsConnector::new(connector)))
    }

    /// What a failed handshake was checking, for its error message.
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        };
        let roots = match &self.roots {
            Some(Roots::File(p)) => p.display().to_string(),
            _ => "the system's CA store".into(),
        };
        if !self.checks_chain() {
            return format!("sslmode={mode} accepts any server certificate");
        }
        let with_file = match self.mode {
            Mode::Prefer | Mode::Require => " with sslrootcert",
            _ => "",
        };
        let names = match self.mode {
            Mode::VerifyFull => "names this host and ",
            _ => "",
        };
        format!("sslmode={mode}{with_file} checks that the server's certificate {names}chains to {roots}")
    }
}

#[cfg(test)]
mod tests {
    use super::{split, Mode, Roots, Tls};
    use std::path::PathBuf;

    fn tls(url: &str) -> Tls {
        split(url).unwrap().1
    }

    #[test]
    fn sslmode_and_sslrootcert_leave_the_url_the_driver_gets() {
        let (driver, t) = split(
            "postgres://ann:pw@db:5433/ttdb?sslmode=verify-full&connect_timeout=5&sslrootcert=%2Fetc%2Fca%20dir%2Fca.pem",
        )
        .unwrap();
        assert_eq!(driver, "postgres://ann:pw@db:5433/ttdb?connect_timeout=5");
        assert_eq!(t.mode, Mode::VerifyFull);
        assert_eq!(
            t.roots,
            Some(Roots::File(PathBuf::from("/etc/ca dir/ca.pem")))
        );
        assert_eq!(split("postgres://db/x").unwrap().0, "postgres://db/x");
        assert_eq!(
            split("postgres://db/x?sslmode=require").unwrap().0,
            "postgres://db/x"
        );
        // The last one wins, as in the driver.
        assert_eq!(
            tls("postgres://db/x?sslmode=disable&sslmode=verify-ca").mode,
            Mode::VerifyCa
        );
    }

    #[test]
    fn modes_follow_libpq() {
        assert_eq!(tls("postgres://db/x"), Tls::default());
        assert_eq!(tls("postgres://db/x").mode, Mode::Prefer);
        for (m, want) in [
            ("disable", Mode::Disable),
            ("prefer", Mode::Prefer),
            ("require", Mode::Require),
            ("verify-ca", Mode::VerifyCa),
        ] {
            assert_eq!(tls(&format!("postgres://db/x?sslmode={m}")).mode, want);
        }
        assert!(!tls("postgres://db/x?sslmode=require").checks_chain());
        assert!(tls("postgres://db/x?sslmode=require&sslrootcert=ca.pem").checks_chain());
        assert!(tls("postgres://db/x?sslmode=verify-ca").checks_chain());
        // sslrootcert=system: verify-full by default, and nothing weaker.
        let system = tls("postgres://db/x?sslrootcert=system");
        assert_eq!(
            (system.mode, system.roots),
            (Mode::VerifyFull, Some(Roots::System))
        );
        let weak = split("postgres://db/x?sslrootcert=system&sslmode=require").unwrap_err();
        assert!(weak.contains("needs sslmode=verify-full"), "{weak}");
    }

    #[test]
    fn unknown_modes_and_bad_root_files_are_clear_errors() {
        let e = split("postgres://db/x?sslmode=bogus").unwrap_err();
        assert_eq!(
            e,
            "sslmode=\"bogus\" is not one of disable, prefer, require, verify-ca or verify-full"
        );
        assert!(split("postgres://db/x?sslmode=allow")
            .unwrap_err()
            .contains("use prefer"));
        let missing = tls("postgres://db/x?sslmode=verify-ca&sslrootcert=/no/such/ca.pem");
        let e = missing.connector().err().unwrap();
        assert!(
            e.starts_with("sslrootcert /no/such/ca.pem: cannot read it"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = tls(&format!(
            "postgres://db/x?sslmode=verify-full&sslrootcert={}",
            junk.display()
        ))
        .connector()
        .err()
        .unwrap();
        assert!(e.contains(&junk.display().to_string()), "{e}");
        assert!(e.contains("no PEM certificate"), "{e}");
        // disable never reads the file.
        let off = tls("postgres://db/x?sslmode=disable&sslrootcert=/no/such/ca.pem");
        assert!(off.connector().unwrap().is_none());
    }
}

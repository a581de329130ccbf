//! ed25519 keys and bundle signatures.
//!
//! A signature signs [`signed_message`]: the format and the bundle's trailer hash, which
//! covers the manifest and every record, so it vouches for all of them. The signature line
//! sits after the trailer, so signing changes no hash and a signed bundle is still a log
//! TVM reads.
//!
//! Key files are one line of text: `ttdb-ed25519-secret-key <64 hex digits>` (the seed)
//! and `ttdb-ed25519-public-key <64 hex digits>`.
use super::format::{signed_message, unhex, Bundle, Signature};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use std::path::Path;
use ttdb_format::signature::hex;

const SECRET_TAG: &str = "ttdb-ed25519-secret-key";
const PUBLIC_TAG: &str = "ttdb-ed25519-public-key";

/// What a bundle's signature says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignatureStatus {
    Unsigned,
    /// Valid: the key (hex) signed exactly this content.
    Valid {
        public_key: String,
    },
    /// Present but wrong: the bundle or its signature was altered.
    Invalid {
        public_key: String,
    },
}

/// A new secret key, seeded by the operating system.
pub fn generate() -> Result<SigningKey, String> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| format!("no randomness from the OS: {e}"))?;
    Ok(SigningKey::from_bytes(&seed))
}

pub fn public_hex(key: &SigningKey) -> String {
    hex(key.verifying_key().as_bytes())
}

/// Writes `key` to `path` (owner-only permissions) and its public half to `path.pub`.
pub fn write_key_files(key: &SigningKey, path: &Path) -> Result<std::path::PathBuf, String> {
    let secret = format!("{SECRET_TAG} {}\n", hex(&key.to_bytes()));
    if path.exists() {
        return Err(format!(
            "{}: exists; refusing to overwrite a key",
            path.display()
        ));
    }
    write_private(path, secret.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut public = path.as_os_str().to_owned();
    public.push(".pub");
    let public = std::path::PathBuf::from(public);
    std::fs::write(&public, format!("{PUBLIC_TAG} {}\n", public_hex(key)))
        .map_err(|e| format!("{}: {e}", public.display()))?;
    Ok(public)
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// Reads a secret key file.
pub fn read_secret_key(path: &Path) -> Result<SigningKey, String> {
    let text = read_small(path)?;
    let seed = text
        .trim()
        .strip_prefix(SECRET_TAG)
        .map(str::trim)
        .and_then(unhex::<32>)
        .ok_or_else(|| {
            format!(
                "{}: not a ttdb secret key (expected `{SECRET_TAG} <64 hex digits>`)",
                path.display()
            )
        })?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A public key given as 64 hex digits, or as the path of a `.pub` file.
pub fn parse_public_key(arg: &str) -> Result<String, String> {
    let text = if unhex::<32>(arg).is_some() {
        arg.to_string()
    } else {
        let path = Path::new(arg);
        if !path.exists() {
            return Err(format!(
                "`{arg}` is neither 64 lowercase hex digits nor a public key file"
            ));
        }
        let t = read_small(path)?;
        t.trim()
            .strip_prefix(PUBLIC_TAG)
            .map(|s| s.trim().to_string())
            .ok_or_else(|| format!("{arg}: not a ttdb public key file"))?
    };
    let bytes = unhex::<32>(&text).ok_or("a public key is 64 lowercase hex digits")?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| "not a valid ed25519 public key".to_string())?;
    Ok(text)
}

fn read_small(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() > 4096 {
        return Err(format!("{}: too large for a key file", path.display()));
    }
    String::from_utf8(bytes).map_err(|_| format!("{}: not text", path.display()))
}

/// Signs `bundle` with `key` (replacing any signature).
pub fn sign(bundle: &mut Bundle, key: &SigningKey) {
    let sig = key.sign(&signed_message(&bundle.sha256));
    bundle.signature = Some(Signature {
        public_key: key.verifying_key().to_bytes(),
        signature: sig.to_bytes(),
    });
}

/// Checks the signature of a bundle read by `format::read` (whose trailer hash was checked).
pub fn check(bundle: &Bundle) -> SignatureStatus {
    let Some(sig) = &bundle.signature else {
        return SignatureStatus::Unsigned;
    };
    let public_key = hex(&sig.public_key);
    let ok = VerifyingKey::from_bytes(&sig.public_key).is_ok_and(|k| {
        // Strict: no weak keys, no malleable signatures (one valid signature per content).
        k.verify_strict(
            &signed_message(&bundle.sha256),
            &ed25519_dalek::Signature::from_bytes(&sig.signature),
        )
        .is_ok()
    });
    if ok {
        SignatureStatus::Valid { public_key }
    } else {
        SignatureStatus::Invalid { public_key }
    }
}

/// Who signed a bundle, as this database sees it: the status (`unsigned`, `valid`,
/// `INVALID`), the key, and the name it is trusted as here, if it is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SignerView {
    pub status: &'static str,
    pub public_key: Option<String>,
    /// The trusted name of the key, if it is trusted here.
    pub trusted_as: Option<String>,
}

/// The signer of `bundle`, judged against the trusted keys of `store` (none without one).
pub fn signer_of(
    bundle: &Bundle,
    store: Option<&crate::store::Store>,
) -> Result<SignerView, crate::store::StoreError> {
    let (status, public_key) = match check(bundle) {
        SignatureStatus::Unsigned => ("unsigned", None),
        SignatureStatus::Valid { public_key } => ("valid", Some(public_key)),
        SignatureStatus::Invalid { public_key } => ("INVALID", Some(public_key)),
    };
    let trusted_as = match (store, &public_key) {
        (Some(s), Some(k)) => crate::store::bundle::trusted_keys(s)?
            .into_iter()
            .find(|t| &t.public_key == k)
            .map(|t| t.name),
        _ => None,
    };
    Ok(SignerView {
        status,
        public_key,
        trusted_as,
    })
}

/// The import policy: an invalid signature is refused always; under `require_signed`, so
/// are an unsigned bundle and one signed by a key not trusted here. `Err` says why.
pub fn check_policy(s: &SignerView, require_signed: bool) -> Result<(), String> {
    match (s.status, &s.public_key, &s.trusted_as) {
        ("INVALID", Some(k), _) => Err(format!(
            "the signature by key {k} does not match the content (altered after signing)"
        )),
        ("unsigned", _, _) if require_signed => Err("unsigned, and --require-signed".into()),
        ("valid", Some(k), None) if require_signed => Err(format!(
            "signed by key {k}, which is not trusted here (`ttdb trust add {k} --name NAME`)"
        )),
        _ => Ok(()),
    }
}

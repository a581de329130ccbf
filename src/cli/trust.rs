//! `ttdb key generate` and `ttdb trust add | list | remove`: the signing keys of bundles.
use super::{CliError, CliResult};
use std::path::PathBuf;
use ttdb_store::bundle::sign;

#[derive(clap::Subcommand, Debug)]
pub enum KeyCommand {
    /// Generate an ed25519 key pair: FILE (secret, owner-only) and FILE.pub.
    Generate {
        /// The secret key file to write (its public key goes to FILE.pub).
        #[arg(short, long)]
        output: PathBuf,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum TrustCommand {
    /// Trust bundles signed by this key (64 hex digits, or a `.pub` file).
    Add {
        /// The public key: 64 hex digits, or a `.pub` file from `ttdb key generate`.
        public_key: String,
        /// The name the key is trusted as (shown by `bundle inspect` and `trust list`).
        #[arg(long)]
        name: String,
    },
    /// The trusted keys.
    List {
        /// Print the result as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
    /// Stop trusting a key (by name or hex).
    Remove {
        /// The key's trusted name, or its 64 hex digits.
        name_or_key: String,
    },
}

pub fn run_key(cmd: &KeyCommand) -> CliResult {
    match cmd {
        KeyCommand::Generate { output } => {
            let key = sign::generate().map_err(|m| CliError {
                message: m,
                code: 1,
            })?;
            let public = sign::write_key_files(&key, output).map_err(|m| CliError {
                message: m,
                code: 1,
            })?;
            println!("{}", sign::public_hex(&key));
            eprintln!(
                "secret key: {} (keep it private); public key: {}",
                output.display(),
                public.display()
            );
            Ok(())
        }
    }
}

pub fn run_trust(db: &Option<PathBuf>, cmd: &TrustCommand) -> CliResult {
    use ttdb_store::store::OpenMode;
    let mode = match cmd {
        TrustCommand::Add { .. } => OpenMode::Create,
        TrustCommand::List { .. } => OpenMode::ReadOnly,
        TrustCommand::Remove { .. } => OpenMode::Write,
    };
    let mut store = super::open_store(db, mode)?;
    match cmd {
        TrustCommand::Add { public_key, name } => {
            let key = sign::parse_public_key(public_key).map_err(|m| CliError {
                message: m,
                code: 2,
            })?;
            if name.trim().is_empty() {
                return Err(CliError {
                    message: "--name must not be empty".into(),
                    code: 2,
                });
            }
            ttdb_store::store::bundle::trust_key(&mut store, name, &key)?;
            eprintln!("trusted `{name}`: {key}");
        }
        TrustCommand::List { json } => {
            let keys = ttdb_store::store::bundle::trusted_keys(&store)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&keys)?);
            } else if keys.is_empty() {
                println!("no trusted keys (`ttdb trust add PUBKEY --name NAME`)");
            } else {
                for k in keys {
                    println!("{}  {}  added {}", k.public_key, k.name, k.added_at);
                }
            }
        }
        TrustCommand::Remove { name_or_key } => {
            if !ttdb_store::store::bundle::untrust_key(&mut store, name_or_key)? {
                return Err(CliError {
                    message: format!("no trusted key is named or equal to `{name_or_key}`"),
                    code: 1,
                });
            }
            eprintln!("removed `{name_or_key}`");
        }
    }
    Ok(())
}

//! A PostgreSQL cluster of one test's own, for the tests that restart the server or change
//! how it is reached (the shared cluster of scripts/test serves every other test at once).
//! Started as scripts/test starts its own: Debian's server binaries, `initdb` as the
//! postgres user when run as root, a unix socket in a folder under /tmp, fsync off; with
//! [`Options::tls`], also TLS on 127.0.0.1. Dropped, it is stopped and removed.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

/// How the cluster differs from the plain one (`Options::default()`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Also listen on 127.0.0.1 (a free port) with `ssl=on`: a CA of the cluster's own
    /// ([`Cluster::ca`]) signs the server's certificate, issued for 127.0.0.1, and
    /// pg_hba.conf takes TCP sessions only over TLS (`hostssl`); the socket stays `trust`.
    pub tls: bool,
}

pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    as_root: bool,
    /// The TCP port, when it listens on 127.0.0.1.
    port: Option<u16>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Cluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|d| {
                let mut v: Vec<PathBuf> = d.flatten().map(|e| e.path().join("bin")).collect();
                v.sort();
                v.pop()
            })
            .filter(|b| b.join("initdb").exists())
            .expect("this test needs PostgreSQL's server binaries under /usr/lib/postgresql (scripts/setup installs the postgresql package)");
        let dir = PathBuf::from(
            String::from_utf8(
                Command::new("mktemp")
                    .args(["-d", "/tmp/ttdb-pgtest.XXXXXX"])
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap()
            .trim(),
        );
        let as_root = unsafe_geteuid() == 0;
        if as_root {
            run(Command::new("chown").arg("postgres:").arg(&dir), "chown");
        }
        let port = options.tls.then(free_port);
        let c = Cluster {
            dir,
            bin,
            as_root,
            port,
        };
        c.pg(
            "initdb",
            &[
                "-D",
                &c.data(),
                "-U",
                "ttdb",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ],
        );
        if options.tls {
            c.make_server_certificate();
            // Replaces initdb's `host ... trust` lines: over TCP, TLS or nothing.
            std::fs::write(
                Path::new(&c.data()).join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
        }
        let log = c.log();
        let out = c
            .command("pg_ctl")
            .args(["-D", &c.data(), "-s", "start", "-w", "-l", &log, "-o"])
            .arg(c.server_options())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the test's PostgreSQL cluster did not start: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        c
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn log(&self) -> String {
        self.dir.join("server.log").display().to_string()
    }

    fn server_options(&self) -> String {
        let mut o = format!(
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -k {}",
            self.dir.display()
        );
        match self.port {
            None => o.push_str(" -c listen_addresses=''"),
            Some(port) => o.push_str(&format!(
                " -c listen_addresses=127.0.0.1 -p {port} -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                self.dir.join("server.pem").display(),
                self.dir.join("server.key").display()
            )),
        }
        o
    }

    /// The certificate of the CA that signed the server's ([`Options::tls`]).
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// server.key and server.pem (for 127.0.0.1) signed by a new CA, ca.pem.
    fn make_server_certificate(&self) {
        let ca = self_signed_ca(&self.dir, "ca");
        let ca_key = self.dir.join("ca.key");
        let key = self.dir.join("server.key");
        let csr = self.dir.join("server.csr");
        let ext = self.dir.join("server.ext");
        std::fs::write(
            &ext,
            "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            p(&key),
            "-out",
            p(&csr),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            p(&csr),
            "-CA",
            p(&ca),
            "-CAkey",
            p(&ca_key),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            p(&ext),
            "-out",
            p(&self.dir.join("server.pem")),
        ]);
        // The server refuses a key that others may read or that it does not own.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        if self.as_root {
            run(Command::new("chown").arg("postgres:").arg(&key), "chown");
        }
    }

    /// The server's `tool`, run as the postgres user when we are root (initdb refuses root).
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        }
    }

    fn pg(&self, tool: &str, args: &[&str]) {
        run(self.command(tool).args(args), tool);
    }

    /// `pg_ctl restart` (fast shutdown: sessions are closed), waiting until it accepts again.
    pub fn restart(&self) {
        // With its log file: else the new server writes to (and holds open) our pipe.
        let (data, log, options) = (self.data(), self.log(), self.server_options());
        self.pg(
            "pg_ctl",
            &[
                "-D", &data, "-s", "restart", "-w", "-m", "fast", "-l", &log, "-o", &options,
            ],
        );
    }

    /// The URL of database `name` on the unix socket (`postgres` exists from the start).
    pub fn url(&self, name: &str) -> String {
        let port = self.port.map(|p| format!("&port={p}")).unwrap_or_default();
        format!("postgres://ttdb@/{name}?host={}{port}", self.dir.display())
    }

    /// The URL of database `name` on 127.0.0.1 ([`Options::tls`]), without options.
    pub fn tcp_url(&self, name: &str) -> String {
        let port = self
            .port
            .expect("a cluster started with Options { tls: true }");
        format!("postgres://ttdb@127.0.0.1:{port}/{name}")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-s", "-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new self-signed CA in `dir`: `name.key` and `name.pem` (returned).
pub fn self_signed_ca(dir: &Path, name: &str) -> PathBuf {
    let pem = dir.join(format!("{name}.pem"));
    // EC keys: generated in milliseconds, where RSA takes a good part of a second.
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "2",
        "-subj",
        &format!("/CN=ttdb test CA {name}"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=keyCertSign",
        "-keyout",
        p(&dir.join(format!("{name}.key"))),
        "-out",
        p(&pem),
    ]);
    pem
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn openssl(args: &[&str]) {
    run(
        Command::new("openssl").args(args),
        "openssl (the TLS tests make their certificates with it; scripts/setup installs it)",
    );
}

/// Runs `cmd`, panicking with its output (and what it is, `what`) unless it succeeds.
fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run it: {e}"));
    assert!(
        out.status.success(),
        "{what} {:?}: {}{}",
        cmd.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TCP port of 127.0.0.1 nobody listens on now (the server takes it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

fn unsafe_geteuid() -> u32 {
    extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() }
}

//! A PostgreSQL cluster of one test's own, for the tests that restart the server (the shared
//! cluster of scripts/test serves every other test at once). Started as scripts/test starts
//! its own: Debian's server binaries, `initdb` as the postgres user when run as root, a unix
//! socket in a folder under /tmp, fsync off. Dropped, it is stopped and removed.
use std::path::PathBuf;
use std::process::Command;

pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    as_root: bool,
}

impl Cluster {
    pub fn start() -> Cluster {
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
            assert!(Command::new("chown")
                .arg("postgres:")
                .arg(&dir)
                .status()
                .unwrap()
                .success());
        }
        let c = Cluster { dir, bin, as_root };
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
        c.pg_ctl(&[
            "start",
            "-w",
            "-l",
            &c.dir.join("server.log").display().to_string(),
            "-o",
            &c.options(),
        ]);
        c
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn options(&self) -> String {
        format!(
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c listen_addresses='' -k {}",
            self.dir.display()
        )
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
        let out = self.command(tool).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let mut all = vec!["-D", data.as_str(), "-s"];
        all.extend_from_slice(args);
        self.pg("pg_ctl", &all);
    }

    /// `pg_ctl restart` (fast shutdown: sessions are closed), waiting until it accepts again.
    pub fn restart(&self) {
        // With its log file: else the new server writes to (and holds open) our pipe.
        let log = self.dir.join("server.log").display().to_string();
        self.pg_ctl(&[
            "restart",
            "-w",
            "-m",
            "fast",
            "-l",
            &log,
            "-o",
            &self.options(),
        ]);
    }

    /// The URL of database `name` (`postgres` exists from the start).
    pub fn url(&self, name: &str) -> String {
        format!("postgres://ttdb@/{name}?host={}", self.dir.display())
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

fn unsafe_geteuid() -> u32 {
    extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() }
}

//! A task's files on its node, where no name a member chose becomes a path.
//!
//! Every task of run `attempt` of job `job` keeps its files in `jobs/<job>/<attempt>/` under
//! the agent's data directory, named by the task's rank in the run (`0.out`, `0.err`, `0.pid`,
//! `0.exit`, `0.claim`) — numbers the agent formats itself, never a job or task group name. The
//! agent creates these directories (0700, its own), and every open goes through a
//! [`JobDir`]: relative to the directory's descriptor, with `O_NOFOLLOW` (a symlink is refused,
//! not followed), `O_NONBLOCK` (a FIFO or device planted there cannot block the agent), and an
//! `fstat` check that what was opened is a regular file. Each path component from the data
//! directory down is opened the same way, so a symlink anywhere on the way is refused too.
//!
//! The cost of the design: a task's logs are found by its rank (`GET /v1/jobs/N/logs` and
//! `gantry logs` map group and replica to it), and the files of earlier runs of a requeued job
//! stay beside the latest (one directory per attempt).

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The most of a small state file (pid, exit code, claim) read back: what the agent writes is
/// far shorter, and a file grown past this was not written by it.
pub const STATE_FILE_BYTES_MAX: u64 = 64 * 1024;

/// One of a task's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Its standard output.
    Out,
    /// Its standard error.
    Err,
    /// The process id of its monitor (written by the monitor itself).
    Pid,
    /// Its exit code (written by its monitor when the command ends).
    Exit,
    /// The agent's claim: the task was started here (created exclusively, before it starts).
    Claim,
}

impl Kind {
    pub fn ext(self) -> &'static str {
        match self {
            Kind::Out => "out",
            Kind::Err => "err",
            Kind::Pid => "pid",
            Kind::Exit => "exit",
            Kind::Claim => "claim",
        }
    }
}

/// A task file's name in its run's directory: the rank and the kind, nothing else.
pub fn file_name(rank: u32, kind: Kind) -> String {
    format!("{rank}.{}", kind.ext())
}

/// Where a task's file is, relative to its agent's data directory (what `gantry logs` names
/// for a task on a remote agent).
pub fn relative_path(job: u64, attempt: u32, rank: u32, kind: Kind) -> String {
    format!("jobs/{job}/{attempt}/{}", file_name(rank, kind))
}

fn io(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// What an open refused, in words, as an I/O error naming the file.
fn refused(path: &Path, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{}: {what}, not a regular file: refused", path.display()),
    )
}

/// Open the directory `name` in `parent` (creating it 0700 if `create`), refusing a symlink
/// or anything but a directory.
fn open_dir_at(parent: impl AsFd, name: &str, create: bool) -> std::io::Result<OwnedFd> {
    if create {
        match nix::sys::stat::mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(io(e)),
        }
    }
    nix::fcntl::openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)
}

/// Open an absolute directory one component at a time, refusing symlinks on the way.
fn open_path(path: &Path) -> std::io::Result<OwnedFd> {
    let mut fd = nix::fcntl::openat(
        nix::fcntl::AT_FDCWD,
        "/",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    for part in path.components() {
        match part {
            std::path::Component::RootDir => {}
            std::path::Component::Normal(name) => {
                let name = name.to_str().ok_or_else(|| refused(path, "a name that is not UTF-8"))?;
                fd = open_dir_at(&fd, name, false)?;
            }
            _ => return Err(refused(path, "a path with . or ..")),
        }
    }
    Ok(fd)
}

/// The directory of one run of one job on this node: every task file of that run is opened
/// through it.
#[derive(Debug)]
pub struct JobDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl JobDir {
    /// `jobs/<job>/<attempt>` under `data_dir` (an absolute path), created if `create`.
    pub fn open(data_dir: &Path, job: u64, attempt: u32, create: bool) -> std::io::Result<JobDir> {
        let root = open_path(data_dir)?;
        let jobs = open_dir_at(&root, "jobs", create)?;
        let one = open_dir_at(&jobs, &job.to_string(), create)?;
        let fd = open_dir_at(&one, &attempt.to_string(), create)?;
        Ok(JobDir { fd, path: data_dir.join("jobs").join(job.to_string()).join(attempt.to_string()) })
    }

    /// The directory's path (for the task's monitor, which writes its pid and exit files by
    /// path: every component is the agent's).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of one task file (see [`JobDir::path`]).
    pub fn file_path(&self, rank: u32, kind: Kind) -> PathBuf {
        self.path.join(file_name(rank, kind))
    }

    /// Open `name` with `flags` (never following a symlink, never blocking) and check it is a
    /// regular file; the descriptor is blocking again before it is returned.
    fn open_regular(&self, name: &str, flags: OFlag, mode: u32) -> std::io::Result<std::fs::File> {
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(&self.fd, name, flags, Mode::from_bits_truncate(mode)).map_err(|e| match e {
            nix::errno::Errno::ELOOP => refused(&self.path.join(name), "a symlink"),
            nix::errno::Errno::ENXIO => refused(&self.path.join(name), "a FIFO or device without a reader"),
            other => io(other),
        })?;
        let stat = nix::sys::stat::fstat(&fd).map_err(io)?;
        let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
        if kind != SFlag::S_IFREG {
            let what = match kind {
                SFlag::S_IFIFO => "a FIFO",
                SFlag::S_IFDIR => "a directory",
                SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
                SFlag::S_IFSOCK => "a socket",
                _ => "something else",
            };
            return Err(refused(&self.path.join(name), what));
        }
        let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).map_err(io)?;
        let blocking = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(blocking)).map_err(io)?;
        Ok(std::fs::File::from(fd))
    }

    /// A task's log (`out`, `err`), new or emptied, mode 0600, owned by `owner` when given
    /// (the task's account: the file is handed to the task as its stdout or stderr).
    pub fn create_log(
        &self,
        rank: u32,
        kind: Kind,
        owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
    ) -> std::io::Result<std::fs::File> {
        let file =
            self.open_regular(&file_name(rank, kind), OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC, 0o600)?;
        // An older file keeps its mode and owner on open: set both.
        nix::sys::stat::fchmod(&file, Mode::from_bits_truncate(0o600)).map_err(io)?;
        if let Some((uid, gid)) = owner {
            nix::unistd::fchown(&file, Some(uid), Some(gid)).map_err(io)?;
        }
        Ok(file)
    }

    /// Append a line to a task's log (the agent's own words: why a task was refused).
    pub fn append(&self, rank: u32, kind: Kind, text: &str) -> std::io::Result<()> {
        let mut file =
            self.open_regular(&file_name(rank, kind), OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT, 0o600)?;
        file.write_all(text.as_bytes())
    }

    /// Create `rank`'s `kind` file with `text` only if it does not exist: `Ok(false)` if it
    /// does (a claim).
    pub fn create_new(&self, rank: u32, kind: Kind, text: &str) -> std::io::Result<bool> {
        let name = file_name(rank, kind);
        match self.open_regular(&name, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL, 0o600) {
            Ok(mut file) => {
                file.write_all(text.as_bytes())?;
                file.sync_all()?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Replace `rank`'s `kind` file with `text` at once (a temporary file renamed over it).
    pub fn replace(&self, rank: u32, kind: Kind, text: &str) -> std::io::Result<()> {
        let name = file_name(rank, kind);
        let tmp = format!("{name}.tmp");
        let _ = nix::unistd::unlinkat(&self.fd, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        let mut file = self.open_regular(&tmp, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL, 0o600)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        nix::fcntl::renameat(&self.fd, tmp.as_str(), &self.fd, name.as_str()).map_err(io)
    }

    /// A small state file's text (`None`: there is none), read through the same checks, at
    /// most [`STATE_FILE_BYTES_MAX`].
    pub fn read(&self, rank: u32, kind: Kind) -> std::io::Result<Option<String>> {
        self.read_name(&file_name(rank, kind))
    }

    fn read_name(&self, name: &str) -> std::io::Result<Option<String>> {
        match self.open_regular(name, OFlag::O_RDONLY, 0) {
            Ok(file) => {
                let mut text = String::new();
                file.take(STATE_FILE_BYTES_MAX).read_to_string(&mut text)?;
                Ok(Some(text))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A task's log for reading (`None`: there is none), through the same checks.
    pub fn open_log(&self, rank: u32, kind: Kind) -> std::io::Result<Option<std::fs::File>> {
        match self.open_regular(&file_name(rank, kind), OFlag::O_RDONLY, 0) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A number written in a state file (`None`: no file, or not a number yet).
    pub fn read_number<T: std::str::FromStr>(&self, rank: u32, kind: Kind) -> Option<T> {
        self.read(rank, kind).ok().flatten().and_then(|t| t.trim().parse().ok())
    }

    /// Is there an entry (of any kind) named for `rank`'s `kind`?
    pub fn exists(&self, rank: u32, kind: Kind) -> bool {
        nix::sys::stat::fstatat(&self.fd, file_name(rank, kind).as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }

    /// Remove `rank`'s `kind` file, if any (a symlink is removed, never followed).
    pub fn remove(&self, rank: u32, kind: Kind) {
        let _ =
            nix::unistd::unlinkat(&self.fd, file_name(rank, kind).as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }

    /// The ranks with a claim in this directory.
    pub fn claimed_ranks(&self) -> std::io::Result<Vec<u32>> {
        let dup = self.fd.try_clone()?;
        let dir = nix::dir::Dir::from_fd(dup).map_err(io)?;
        let mut ranks: Vec<u32> = dir
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_str().ok()?.to_string();
                name.strip_suffix(".claim")?.parse().ok()
            })
            .collect();
        ranks.sort_unstable();
        Ok(ranks)
    }
}

/// The runs with a directory under `data_dir/jobs`: (job, attempt), and the job directories
/// in the layout of agents before per-attempt directories (`jobs/<job>/<name>.claim-<attempt>`).
pub fn runs_on_disk(data_dir: &Path) -> (Vec<(u64, u32)>, Vec<u64>) {
    let numbers = |dir: &Path| -> Vec<u64> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    };
    let mut runs = Vec::new();
    let mut legacy = Vec::new();
    let jobs = data_dir.join("jobs");
    for job in numbers(&jobs) {
        let dir = jobs.join(job.to_string());
        for attempt in numbers(&dir) {
            if let Ok(attempt) = u32::try_from(attempt) {
                runs.push((job, attempt));
            }
        }
        let has_legacy = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_str().is_some_and(|n| n.contains(".claim-")));
        if has_legacy {
            legacy.push(job);
        }
    }
    runs.sort_unstable();
    (runs, legacy)
}

/// The claims in a job directory of the layout before per-attempt directories: their text,
/// read without following symlinks (the names were built from group names there).
pub fn legacy_claims(data_dir: &Path, job: u64) -> Vec<String> {
    let Ok(root) = open_path(data_dir) else { return Vec::new() };
    let Ok(jobs) = open_dir_at(&root, "jobs", false) else { return Vec::new() };
    let Ok(fd) = open_dir_at(&jobs, &job.to_string(), false) else { return Vec::new() };
    let dir = JobDir { fd, path: data_dir.join("jobs").join(job.to_string()) };
    let Ok(listing) = dir.fd.try_clone().map_err(|_| ()).and_then(|d| nix::dir::Dir::from_fd(d).map_err(|_| ())) else {
        return Vec::new();
    };
    let names: Vec<String> = listing
        .into_iter()
        .flatten()
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .filter(|n| n.contains(".claim-") && !n.ends_with(".tmp"))
        .collect();
    names.iter().filter_map(|n| dir.read_name(n).ok().flatten()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gantry-files-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn files_are_named_by_rank_and_kind_only() {
        assert_eq!(file_name(3, Kind::Out), "3.out");
        assert_eq!(relative_path(7, 1, 0, Kind::Err), "jobs/7/1/0.err");
    }

    #[test]
    fn a_symlink_planted_for_a_task_file_is_refused_not_followed() {
        let data = temp("symlink");
        let dir = JobDir::open(&data, 1, 0, true).expect("job dir");
        let target = data.join("victim");
        std::fs::write(&target, "untouched").expect("victim");
        std::os::unix::fs::symlink(&target, dir.file_path(0, Kind::Out)).expect("symlink");
        let refused = dir.create_log(0, Kind::Out, None).expect_err("a symlink");
        assert!(refused.to_string().contains("a symlink"), "{refused}");
        assert_eq!(std::fs::read_to_string(&target).expect("victim"), "untouched");
        std::os::unix::fs::symlink(&target, dir.file_path(0, Kind::Exit)).expect("symlink");
        assert!(dir.read(0, Kind::Exit).is_err(), "a symlink is not read either");
        let _ = std::fs::remove_dir_all(&data);
    }

    #[test]
    fn a_fifo_planted_for_a_task_file_is_an_error_not_a_hang() {
        let data = temp("fifo");
        let dir = JobDir::open(&data, 1, 0, true).expect("job dir");
        for kind in [Kind::Out, Kind::Pid] {
            nix::unistd::mkfifo(&dir.file_path(0, kind), Mode::from_bits_truncate(0o600)).expect("fifo");
        }
        let refused = dir.create_log(0, Kind::Out, None).expect_err("a FIFO without a reader");
        assert!(refused.to_string().contains("FIFO"), "{refused}");
        let refused = dir.read(0, Kind::Pid).expect_err("a FIFO opened to read");
        assert!(refused.to_string().contains("a FIFO"), "{refused}");
        let _ = std::fs::remove_dir_all(&data);
    }

    #[test]
    fn a_symlink_on_the_way_to_the_job_directory_is_refused() {
        let data = temp("dirlink");
        let elsewhere = temp("dirlink-elsewhere");
        std::fs::create_dir_all(data.join("jobs")).expect("jobs");
        std::os::unix::fs::symlink(&elsewhere, data.join("jobs/5")).expect("symlink");
        assert!(JobDir::open(&data, 5, 0, true).is_err());
        assert!(!elsewhere.join("0").exists(), "nothing made through the link");
        let _ = std::fs::remove_dir_all(&data);
        let _ = std::fs::remove_dir_all(&elsewhere);
    }

    #[test]
    fn claims_are_exclusive_and_state_files_round_trip() {
        let data = temp("claims");
        let dir = JobDir::open(&data, 2, 1, true).expect("job dir");
        assert!(dir.create_new(4, Kind::Claim, "{}").expect("first"));
        assert!(!dir.create_new(4, Kind::Claim, "{}").expect("second"));
        dir.replace(4, Kind::Exit, "3\n").expect("exit");
        assert_eq!(dir.read_number::<i32>(4, Kind::Exit), Some(3));
        assert_eq!(dir.claimed_ranks().expect("listed"), vec![4]);
        assert_eq!(runs_on_disk(&data), (vec![(2, 1)], Vec::new()));
        let _ = std::fs::remove_dir_all(&data);
    }
}

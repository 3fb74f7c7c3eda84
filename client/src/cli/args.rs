//! The grammar: every subcommand, its flags, and an example for `--help`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const ABOUT: &str = "The command line for wsfs, a workspace filesystem served over gRPC";

const AFTER_HELP: &str = "\
Configuration (flags win over the environment):
  WSFS_SERVER   server URL (default http://127.0.0.1:50051)
  WSFS_SESSION  the session every file command works on
  WSFS_TOKEN    bearer token, sent as `authorization: Bearer ...`
  WSFS_CA       CA certificate (PEM) of an https:// server

Exit codes: 0 success, 1 the operation failed (the reason is printed on
stderr as `wsfs: REASON: message`), 2 usage error.

Example:
  wsfs session create                 # prints a session id
  export WSFS_SESSION=$(wsfs session create)
  echo 'fn main() {}' | wsfs write src/main.rs
  wsfs grep main";

/// A byte count with an optional suffix, as rclone and dd take them: `512`,
/// `64K`, `32M`, `1G`, `2T` (powers of 1024; a trailing `B`, `iB` and any
/// case accepted: `1GiB`, `10mb`).
pub fn parse_size(raw: &str) -> Result<u64, String> {
    let s = raw.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("'{raw}' is not a size (e.g. 512, 64K, 32M, 1G)"))?;
    let suffix = suffix.trim().to_ascii_lowercase();
    let suffix = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b'))
        .unwrap_or(&suffix);
    let shift = match suffix {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("'{raw}': unknown size suffix (use K, M, G or T)")),
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{raw}' is too large"))
}

/// `UID:GID`, two numbers, as chown takes them.
pub fn parse_owner(raw: &str) -> Result<(u32, u32), String> {
    let form = || format!("'{raw}' is not UID:GID (two numbers, e.g. 1000:1000)");
    let (uid, gid) = raw.split_once(':').ok_or_else(form)?;
    Ok((
        uid.parse().map_err(|_| form())?,
        gid.parse().map_err(|_| form())?,
    ))
}

/// Octal permission bits: `640`, `0750`, at most `777`.
pub fn parse_bits(raw: &str) -> Result<wsfs_client::Permissions, String> {
    wsfs_client::Permissions::parse_octal(raw).map_err(|e| e.to_string())
}

#[derive(Debug, Parser)]
#[command(name = "wsfs", version, about = ABOUT, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The flags every command takes, listed apart from each command's own.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Server URL [default: the one `wsfs use` saved, else
    /// http://127.0.0.1:50051].
    #[arg(long, global = true, env = "WSFS_SERVER")]
    pub server: Option<String>,
    /// Session id for file commands.
    #[arg(short = 's', long, global = true, env = "WSFS_SESSION")]
    pub session: Option<String>,
    /// Bearer token.
    #[arg(long, global = true, env = "WSFS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificate (PEM) for an https:// server.
    #[arg(long, global = true, env = "WSFS_CA")]
    pub ca: Option<PathBuf>,
    /// Print JSON: one document, or one object per line for streams.
    #[arg(long, global = true)]
    pub json: bool,
    /// No confirmation lines and no progress bars.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, list, show and remove sessions.
    #[command(
        subcommand,
        after_help = "Examples:\n  wsfs session create --directory --max-write-bytes 1G --ttl 3600\n  export WSFS_SESSION=$(wsfs session create)\n  wsfs session list\n  wsfs session rm $WSFS_SESSION"
    )]
    Session(SessionCommand),
    /// List a directory.
    #[command(after_help = "Example:\n  wsfs ls -l src\n  wsfs ls -R --json")]
    Ls(LsArgs),
    /// Print a text file (or a page of its lines), or raw bytes with --bytes.
    #[command(
        after_help = "Example:\n  wsfs cat src/main.rs\n  wsfs cat --offset 100 --limit 20 big.log\n  wsfs cat --bytes image.png > image.png"
    )]
    Cat(CatArgs),
    /// Download a file (streamed; `-` for stdout).
    #[command(
        after_help = "Example:\n  wsfs get data/model.bin ./model.bin\n  wsfs get logs/run.log - | tail"
    )]
    Get(GetArgs),
    /// Upload a file (streamed; `-` for stdin).
    #[command(
        after_help = "Example:\n  wsfs put ./dataset.csv data/dataset.csv\n  tar c src | wsfs put - backup/src.tar"
    )]
    Put(PutArgs),
    /// Write text to a file, replacing it (text from the argument or stdin).
    #[command(
        after_help = "Example:\n  wsfs write notes/todo.md '- ship it'\n  echo hello | wsfs write greeting.txt"
    )]
    Write(WriteArgs),
    /// Append text to a file, creating it when missing.
    #[command(after_help = "Example:\n  wsfs append log.txt 'step 2 done'")]
    Append(WriteArgs),
    /// Replace exact text in a file (exactly one match unless --all).
    #[command(
        after_help = "Example:\n  wsfs edit src/main.rs --old 'fn main' --new 'pub fn main' --dry-run"
    )]
    Edit(EditArgs),
    /// Remove files, or directories with -r.
    #[command(
        after_help = "As rm: a directory needs -r, even an empty one; a path that fails is reported\nand the others are still removed (exit 1).\n\nExample:\n  wsfs rm -rf build"
    )]
    Rm(RmArgs),
    /// Create directories.
    #[command(after_help = "Example:\n  wsfs mkdir -p src/bin")]
    Mkdir(MkdirArgs),
    /// Move or rename a file or directory.
    #[command(after_help = "Example:\n  wsfs mv draft.md notes/final.md")]
    Mv(TransferArgs),
    /// Copy a file or directory.
    #[command(after_help = "Example:\n  wsfs cp -f src/lib.rs backup/lib.rs")]
    Cp(TransferArgs),
    /// Show a path's kind, size, mode, times and version.
    #[command(after_help = "Example:\n  wsfs stat src/main.rs")]
    Stat(StatArgs),
    /// Change the permission bits of files and directories.
    #[command(
        after_help = "MODE is octal (755, 0644; at most 777: setuid, setgid and sticky are never\napplied), or +x / -x to add or remove every execute bit.\n\nExamples:\n  wsfs chmod 755 scripts/build.sh\n  wsfs chmod +x bin/run bin/test"
    )]
    Chmod(ChmodArgs),
    /// List files matching a glob (`*`, `**`, `{a,b}`, `[ab]`).
    #[command(after_help = "Example:\n  wsfs glob '**/*.rs'")]
    Glob(GlobArgs),
    /// Search file contents (regex), printed as `path:line:text`.
    #[command(
        after_help = "Exit status: 0 when something matched, 1 when nothing did, 2 on an error (as grep and rg).\n\nExamples:\n  wsfs grep -i -C 2 --glob '*.rs' 'todo|fixme' src\n  wsfs grep -l -w Session src tests"
    )]
    Grep(GrepArgs),
    /// Print change events as they happen, one line each.
    #[command(
        after_help = "Each line starts with the event's sequence number. Without --since, events\nstart from now; --since N replays the events after N that the server still holds\n(then goes on live), and --since 0 replays from the first; events too old to be\nheld give one RESYNC line instead: read the workspace again.\n\nExamples:\n  wsfs watch src --json\n  wsfs watch --since 0\n  wsfs watch --since 42 -g '*.rs'"
    )]
    Watch(WatchArgs),
    /// Mount the session at a directory (FUSE, Linux) until Ctrl-C, SIGTERM
    /// or `wsfs unmount DIR`.
    #[command(
        after_help = "Runs in the foreground. A file written in the mount is committed to the session\nwhen it is closed or fsynced; changes made elsewhere appear within a second.\nNeeds /dev/fuse, and root or fusermount3 (Debian: apt-get install fuse3).\nSee docs/MOUNT.md.\n\nExamples:\n  wsfs mount --session $WSFS_SESSION /mnt/work\n  wsfs mount --read-only /mnt/review"
    )]
    Mount(MountArgs),
    /// Unmount a directory that `wsfs mount` mounted.
    #[command(after_help = "Example:\n  wsfs unmount /mnt/work")]
    Unmount(UnmountArgs),
    /// Serve the session to an AI agent as an MCP server on stdio.
    #[command(
        after_help = "Tools: read, write, edit, multi_edit, list, glob, grep, stat, move, copy,\ndelete, mkdir, snapshot, restore, diff_snapshot, list_snapshots. Errors come back as tool\nerrors that start with the wsfs reason.\n\nExample (an MCP client's server entry):\n  {\"command\": \"wsfs\", \"args\": [\"mcp\"],\n   \"env\": {\"WSFS_SERVER\": \"http://127.0.0.1:50051\", \"WSFS_SESSION\": \"<id>\"}}"
    )]
    Mcp,
    /// Save the server, session and token to use when no flag or variable
    /// names them; without SESSION, show what is saved.
    #[command(
        after_help = "Saved in $WSFS_CONFIG, else wsfs/context.json under the user's configuration\ndirectory, readable by its owner only. Flags and WSFS_* variables always win.\n\nExamples:\n  wsfs use $(wsfs session create)\n  wsfs --server http://build-box:50051 use 0b5e...\n  wsfs use\n  wsfs use --clear"
    )]
    Use {
        /// The session to use from now on; it must exist.
        session: Option<String>,
        /// Forget what is saved.
        #[arg(long, conflicts_with = "session")]
        clear: bool,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  wsfs completions bash > ~/.local/share/bash-completion/completions/wsfs\n  wsfs completions zsh > \"${fpath[1]}/_wsfs\"\n  wsfs completions fish > ~/.config/fish/completions/wsfs.fish"
    )]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Take, list, restore and remove snapshots of the session.
    #[command(
        subcommand,
        after_help = "SNAPSHOT is an id, a tag, or the start of an id (4 characters or more).\n\nExamples:\n  wsfs snapshot create --tag before-refactor\n  wsfs snapshot diff before-refactor\n  wsfs snapshot restore before-refactor"
    )]
    Snapshot(SnapshotCommand),
    /// Save the session (or a snapshot) as a ZIP archive.
    #[command(after_help = "Example:\n  wsfs export workspace.zip")]
    Export(ExportArgs),
    /// Replace the session's files with a wsfs archive's, or add an ordinary
    /// zip or tar's files.
    #[command(after_help = IMPORT_HELP)]
    Import(ImportArgs),
    /// Issue bearer tokens for callers.
    #[command(
        subcommand,
        after_help = "Issuing needs the admin token or the session's system token (the one\n`wsfs session create` prints once).\n\nExamples:\n  wsfs token issue agent-1\n  WSFS_TOKEN=$(wsfs token issue agent-1) wsfs write home/agent-1/notes.md hi"
    )]
    Token(TokenCommand),
    /// Mirror a remote directory into a local one (only files that differ).
    #[command(after_help = PULL_HELP)]
    Pull(SyncArgs),
    /// Mirror a local directory into a remote one (only files that differ).
    #[command(after_help = PUSH_HELP)]
    Push(SyncArgs),
    /// Show a directory as a tree.
    #[command(after_help = "Example:\n  wsfs tree src\n  wsfs tree -L 2")]
    Tree(TreeArgs),
    /// Bytes used under each directory.
    #[command(
        disable_help_flag = true,
        after_help = "Sizes are the files' bytes (not disk blocks). As du: every directory, then PATH's\ntotal; -d 0 (or --summarize) prints the total alone. `-s` is the global --session\nflag here, not du's -s.\n\nExamples:\n  wsfs du -h -d 0\n  wsfs du -h -d 1 src"
    )]
    Du(DuArgs),
    /// Print the first lines of a text file.
    #[command(after_help = "Example:\n  wsfs head -n 5 README.md")]
    Head(HeadArgs),
    /// Print the last lines of a text file.
    #[command(after_help = "Example:\n  wsfs tail -n 20 logs/run.log")]
    Tail(HeadArgs),
    /// Create empty files, or set an existing one's modification time to now.
    #[command(after_help = "Example:\n  wsfs touch notes/todo.md")]
    Touch(TouchArgs),
    /// Print this client's version, and whether the server answers and
    /// with which version.
    #[command(after_help = "Example:\n  wsfs version")]
    Version,
    /// Check the connection: the server answers, over TLS or plaintext, what
    /// it enables, whether the token works, and what to fix.
    #[command(
        after_help = "Exit status: 0 when every check passes, 1 otherwise.\n\nExample:\n  wsfs doctor\n  WSFS_SERVER=https://wsfs.example:50051 WSFS_CA=ca.pem wsfs doctor"
    )]
    Doctor,
}

const IMPORT_HELP: &str = "\
A wsfs archive (from `wsfs export`) replaces the whole workspace at once: the
server checks it first, and a refused archive changes nothing.

An ordinary archive (a zip, a tar, a gzipped tar) is added to the workspace as
tar extracts: each file is written (replacing one at the same path), the other
files stay. A file the session refuses (its limits, a path too deep) is
reported and the others still written (exit 1). Symbolic links and special
files are skipped. From stdin, a tar or tar.gz is read as it comes; a zip needs
its file's path, unless it is a wsfs archive.

Examples:
  wsfs import workspace.zip
  wsfs import --strip-components 1 --prefix vendor/lib lib-1.2.tar.gz";

#[derive(Debug, Args)]
pub struct TreeArgs {
    #[arg(default_value = "")]
    pub path: String,
    /// Levels to show (default: all).
    #[arg(short = 'L', long = "level", value_name = "N")]
    pub level: Option<u32>,
}

#[derive(Debug, Args)]
pub struct DuArgs {
    /// Directories (or files) to measure (default: the whole workspace).
    pub paths: Vec<String>,
    /// Only the total of each PATH, as `-d 0` (`-s` is the global
    /// --session flag).
    #[arg(long, conflicts_with = "max_depth")]
    pub summarize: bool,
    /// Show directories at most this far below each PATH.
    #[arg(short = 'd', long, value_name = "N")]
    pub max_depth: Option<u32>,
    /// Sizes for people (1.5 MiB).
    #[arg(short = 'h', long)]
    pub human_readable: bool,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

#[derive(Debug, Args)]
pub struct HeadArgs {
    pub path: String,
    /// Lines to print.
    #[arg(short = 'n', long, default_value_t = 10, value_name = "N")]
    pub lines: u64,
}

#[derive(Debug, Args)]
pub struct TouchArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Do not create missing files.
    #[arg(short = 'c', long)]
    pub no_create: bool,
}

/// Shared by pull and push: `after_help` needs one literal.
macro_rules! sync_note {
    () => {
        "A file is transferred when it is missing on the other side, when the sizes
differ, or, when the sizes are equal, when the SHA-256 of the two contents
differ (the remote file is streamed here to hash it; sizes are compared
first so that only same-size files are read). Symbolic links are skipped.
--delete removes what exists only on the destination. --json prints a
summary: {\"transferred\", \"unchanged\", \"deleted\", \"bytes\", ...}.

"
    };
}

const PULL_HELP: &str = concat!(sync_note!(), "Example:\n  wsfs pull src ./src --delete");
const PUSH_HELP: &str = concat!(
    sync_note!(),
    "Example:\n  wsfs push ./out results --delete\n  wsfs push ./out results --json"
);

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Create a session and print its id.
    #[command(
        after_help = "Prints the session id alone, for `export WSFS_SESSION=$(wsfs session create)`;\n--json prints the whole session, with its token when the server issues one.\n\nExamples:\n  wsfs session create --directory --label owner=ci --ttl 3600\n  wsfs session create --directory --from 0b5e...:baseline   (a fork of that snapshot)"
    )]
    Create(Box<SessionCreateArgs>),
    /// List the server's sessions.
    #[command(
        after_help = "Needs the admin token when the server has tokens on. Servers that share an object\nstore (--object-store) each list every replica's sessions, with the REPLICA that\nserves each (\"-\": none does now; `wsfs session recover` brings it back). A\nserver without one lists only its own: through a proxy in front of several such\nservers, ask each directly (--server) for the whole list.\n\nExamples:\n  wsfs session list --label owner=ci\n  wsfs session list --local --json"
    )]
    List {
        /// Only sessions with this label KEY=VALUE (repeatable: all of them).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// Count each session's files and bytes too (the server walks every
        /// listed workspace).
        #[arg(long)]
        usage: bool,
        /// Only the sessions of the server reached, not the other replicas'
        /// it knows from a shared object store.
        #[arg(long)]
        local: bool,
    },
    /// Show one session (default: WSFS_SESSION).
    #[command(after_help = "Example:\n  wsfs session show 0b5e...")]
    Show { id: Option<String> },
    /// Remove sessions and everything they own.
    #[command(after_help = "Example:\n  wsfs session rm $WSFS_SESSION")]
    Rm {
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Bring back a DIRECTORY session from the server's object store, on
    /// the server this command reaches, when the one that served it is gone.
    #[command(
        after_help = "Prints the session id alone, like create; --json prints the whole session.\n\nExamples:\n  wsfs session recover 0b5e...\n  wsfs session recover 0b5e... --snapshot 7c1d...   (that snapshot, not the latest)"
    )]
    Recover {
        id: String,
        /// The snapshot to bring back (default: its latest in the store).
        #[arg(long)]
        snapshot: Option<String>,
        /// Take the session even while another server's lease on it is live.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Args)]
pub struct SessionCreateArgs {
    /// Keep the files in a directory on the server's disk (bind-mountable).
    #[arg(long)]
    pub directory: bool,
    /// With --directory: an existing directory inside the server's allowed roots.
    #[arg(long, requires = "directory")]
    pub root: Option<PathBuf>,
    /// Refuse every change to the files (READ_ONLY): for a session that
    /// serves a tree to readers only.
    #[arg(long)]
    pub read_only: bool,
    /// Swarm layout: shared/, home/<caller>/, sys/.
    #[arg(long)]
    pub swarm: bool,
    /// Keep the files in this running container, through one of the
    /// server's container runtimes (--runtime) in its directory --workdir.
    #[arg(long, value_name = "NAME", conflicts_with = "directory", requires_all = ["runtime", "workdir"])]
    pub container: Option<String>,
    /// With --container: the server's runtime to reach it through.
    #[arg(long, requires = "container")]
    pub runtime: Option<String>,
    /// With --container: the absolute directory inside it.
    #[arg(long, requires = "container")]
    pub workdir: Option<String>,
    /// A label KEY=VALUE (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// A file to seed: WORKSPACE_PATH=LOCAL_FILE (repeatable).
    #[arg(long = "seed", value_name = "PATH=FILE")]
    pub seeds: Vec<String>,
    /// Largest single write or upload (default 32M, at most the server's
    /// --max-write-bytes). Sizes take K, M, G, T suffixes.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_write_bytes: Option<u64>,
    /// Most bytes in the workspace (default: the server's).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_total_bytes: Option<u64>,
    /// Most files in the workspace (default: no limit).
    #[arg(long, value_name = "N")]
    pub max_files: Option<u64>,
    /// Most segments in a path (default 16).
    #[arg(long, value_name = "N")]
    pub max_path_depth: Option<u32>,
    /// Most characters in one path segment (default 80).
    #[arg(long, value_name = "N")]
    pub max_segment_length: Option<u32>,
    /// Remove the session after this many idle seconds.
    #[arg(long, value_name = "SECONDS")]
    pub ttl: Option<u64>,
    /// A fork: the workspace is exactly this snapshot of another session
    /// (snapshot by id, id prefix or tag; default: its newest), which the
    /// new session also holds as its first snapshot.
    #[arg(long, value_name = "SESSION[:SNAPSHOT]", conflicts_with_all = ["root", "seeds"])]
    pub from: Option<String>,
    /// The new session's id, a lowercase UUID (default: a random one).
    #[arg(long, value_name = "UUID")]
    pub id: Option<String>,
    /// With --directory: everything the service creates belongs to
    /// UID:GID (the server must run as root or with CAP_CHOWN).
    #[arg(long, value_name = "UID:GID", requires = "directory", value_parser = parse_owner)]
    pub owner: Option<(u32, u32)>,
    /// With --owner: bits of new files whose write names none (default 644).
    #[arg(long, value_name = "MODE", requires = "owner", value_parser = parse_bits)]
    pub file_mode: Option<wsfs_client::Permissions>,
    /// With --owner: bits of new directories whose mkdir names none
    /// (default 755).
    #[arg(long, value_name = "MODE", requires = "owner", value_parser = parse_bits)]
    pub dir_mode: Option<wsfs_client::Permissions>,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[arg(default_value = "")]
    pub path: String,
    /// Long format: kind, size, modified time, version, name.
    #[arg(short, long)]
    pub long: bool,
    /// Recursive (all depths).
    #[arg(short = 'R', long, conflicts_with = "depth")]
    pub recursive: bool,
    /// Levels to descend (1 = the directory's own entries).
    #[arg(long)]
    pub depth: Option<u32>,
    /// Accepted for ls habits: names starting with `.` are always listed.
    #[arg(short = 'a', long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct CatArgs {
    pub path: String,
    /// First line to print (0-based); with --bytes, the first byte.
    #[arg(long)]
    pub offset: Option<u64>,
    /// Lines to print; with --bytes, bytes.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Raw bytes (streamed), for files that are not text.
    #[arg(long)]
    pub bytes: bool,
    /// Print the file as this snapshot holds it (an id, a tag, or the start
    /// of an id), byte for byte.
    #[arg(long, value_name = "SNAPSHOT", conflicts_with_all = ["offset", "limit"])]
    pub snapshot: Option<String>,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// The workspace file.
    pub remote: String,
    /// Where to save it (`-` for stdout; default: its name, here).
    pub local: Option<String>,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// The local file (`-` for stdin).
    pub local: String,
    /// The workspace path (default: the local file's name).
    pub remote: Option<String>,
    /// Fail if the remote file already exists.
    #[arg(long)]
    pub create: bool,
    /// Only if the remote file is at this version (0: must not exist).
    #[arg(long)]
    pub if_version: Option<u64>,
}

#[derive(Debug, Args)]
pub struct WriteArgs {
    pub path: String,
    /// The text, written as a line: a newline is added unless it ends with
    /// one (default: read stdin, written as it is).
    #[arg(allow_hyphen_values = true)]
    pub text: Option<String>,
    /// Write TEXT without adding a newline, as `echo -n`.
    #[arg(short = 'n')]
    pub no_newline: bool,
    /// Fail if the file already exists.
    #[arg(long)]
    pub create: bool,
    /// Only if the file is at this version (0: must not exist).
    #[arg(long)]
    pub if_version: Option<u64>,
    /// Fail instead of creating missing parent directories.
    #[arg(long)]
    pub no_parents: bool,
}

#[derive(Debug, Args)]
pub struct EditArgs {
    pub path: String,
    /// The exact text to replace.
    #[arg(long, allow_hyphen_values = true)]
    pub old: String,
    /// The replacement.
    #[arg(long, allow_hyphen_values = true)]
    pub new: String,
    /// Replace every occurrence.
    #[arg(long)]
    pub all: bool,
    /// Change nothing; print the diff.
    #[arg(long)]
    pub dry_run: bool,
    /// Only if the file is at this version.
    #[arg(long)]
    pub if_version: Option<u64>,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Remove directories and their contents.
    #[arg(short, long)]
    pub recursive: bool,
    /// A missing path is not an error.
    #[arg(short, long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct MkdirArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Create missing parents; an existing directory is fine.
    #[arg(short, long)]
    pub parents: bool,
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    pub source: String,
    /// The new path; an existing directory (or a path ending in `/`)
    /// receives the source inside it, as cp and mv do.
    pub destination: String,
    /// Replace an existing destination.
    #[arg(short = 'f', long)]
    pub overwrite: bool,
    /// Treat DESTINATION as the new path even when it is a directory.
    #[arg(short = 'T', long)]
    pub no_target_directory: bool,
    /// Accepted for cp habits: directories are always copied whole.
    #[arg(short = 'r', short_alias = 'R', long, hide = true)]
    pub recursive: bool,
}

#[derive(Debug, Args)]
pub struct StatArgs {
    pub path: String,
}

#[derive(Debug, Args)]
pub struct ChmodArgs {
    /// Octal bits (755) or +x / -x.
    #[arg(allow_hyphen_values = true)]
    pub mode: String,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

#[derive(Debug, Args)]
pub struct GlobArgs {
    pub pattern: String,
    /// Base directory; the pattern matches paths relative to it.
    #[arg(default_value = "")]
    pub path: String,
    /// Most paths to return (server default 1000).
    #[arg(long)]
    pub max: Option<u64>,
}

#[derive(Debug, Args)]
pub struct GrepArgs {
    /// A regex (Rust `regex` syntax), or literal text with -F.
    pub pattern: String,
    /// Directories or files to search (default: the whole workspace).
    pub paths: Vec<String>,
    /// Match letters in either case (`todo` finds `TODO` and `Todo`).
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// The pattern is literal text.
    #[arg(short = 'F', long)]
    pub fixed_strings: bool,
    /// Only whole words: the match must not touch a letter, digit or `_`.
    #[arg(short = 'w', long)]
    pub word_regexp: bool,
    /// Lines of context around each match.
    #[arg(short = 'C', long, value_name = "N")]
    pub context: Option<u32>,
    /// Lines of context after each match (overrides -C after).
    #[arg(short = 'A', long, value_name = "N")]
    pub after_context: Option<u32>,
    /// Lines of context before each match (overrides -C before).
    #[arg(short = 'B', long, value_name = "N")]
    pub before_context: Option<u32>,
    /// Print only the paths of files with a match.
    #[arg(short = 'l', long, conflicts_with = "count")]
    pub files_with_matches: bool,
    /// Print `path:count` for each file with a match.
    #[arg(short = 'c', long)]
    pub count: bool,
    /// Print only the matched text (the first match of each line).
    #[arg(short = 'o', long)]
    pub only_matching: bool,
    /// Only files matching this glob: without `/` it matches the file name
    /// at any depth (as ripgrep), with `/` the path relative to PATH.
    #[arg(short = 'g', long)]
    pub glob: Option<String>,
    /// Stop after this many matches per PATH (server default 1000; with -l
    /// or -c, 1,000,000).
    #[arg(short = 'm', long)]
    pub max: Option<u64>,
    /// Accepted for grep habits: line numbers are always shown.
    #[arg(short = 'n', long)]
    pub line_number: bool,
    /// Accepted for grep habits: directories are always searched whole.
    #[arg(short = 'r', long, short_alias = 'R')]
    pub recursive: bool,
    /// Colour: auto (on a terminal, unless NO_COLOR), always, never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[arg(default_value = "")]
    pub path: String,
    /// Only paths matching this glob.
    #[arg(short = 'g', long)]
    pub glob: Option<String>,
    /// Replay the events after this sequence number, then go on live (0:
    /// from the first event the server holds).
    #[arg(long, value_name = "SEQ")]
    pub since: Option<u64>,
    /// Only the directory's own entries, not its subdirectories.
    #[arg(long)]
    pub shallow: bool,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    /// Refuse every change (programs get EROFS).
    #[arg(long)]
    pub read_only: bool,
    /// An existing, empty directory.
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct UnmountArgs {
    pub dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot; prints its id.
    #[command(after_help = "Example:\n  wsfs snapshot create --tag before-refactor")]
    Create {
        #[arg(long, default_value = "")]
        tag: String,
    },
    /// List the session's snapshots.
    #[command(after_help = "Example:\n  wsfs snapshot list")]
    List,
    /// Put the workspace back exactly as the snapshot holds it.
    #[command(
        after_help = "SNAPSHOT is an id, a tag, or the start of an id (4 characters or more).\n\nExamples:\n  wsfs snapshot restore before-refactor\n  wsfs snapshot restore 9f1c\n  wsfs snapshot restore before-refactor --path src/main.rs\n  wsfs snapshot restore before-refactor --path src"
    )]
    Restore {
        #[arg(value_name = "SNAPSHOT")]
        id: String,
        /// Put back only this file or directory, exactly as the snapshot
        /// holds it (files beneath it that the snapshot lacks are removed;
        /// the rest of the workspace is left as it is).
        #[arg(long, value_name = "PATH")]
        path: Option<String>,
    },
    /// What changed in the workspace since a snapshot: `A` added, `D`
    /// deleted, `M` modified (a trailing `/` marks a directory).
    #[command(
        after_help = "SNAPSHOT is an id, a tag, or the start of an id.\nExit status: 0 when nothing changed, 1 when something did (as git diff --exit-code).\n\nExample:\n  wsfs snapshot diff before-refactor"
    )]
    Diff {
        #[arg(value_name = "SNAPSHOT")]
        id: String,
    },
    /// Remove a snapshot.
    #[command(
        after_help = "SNAPSHOT is an id, a tag, or the start of an id.\n\nExample:\n  wsfs snapshot rm before-refactor"
    )]
    Rm {
        #[arg(value_name = "SNAPSHOT")]
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The ZIP to write (`-` for stdout).
    pub file: String,
    /// Export this snapshot (id, tag or start of an id) instead of the live
    /// workspace.
    #[arg(long)]
    pub snapshot: Option<String>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The archive to read: a .zip, .tar, .tar.gz or .tgz (`-` for stdin).
    pub file: String,
    /// Drop this many leading components from each path in an ordinary
    /// archive, as tar does.
    #[arg(long, value_name = "N")]
    pub strip_components: Option<usize>,
    /// Put an ordinary archive's files under this directory.
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a caller's token for the session; prints the token.
    #[command(
        after_help = "Example:\n  wsfs token issue agent-1\n  WSFS_TOKEN=$(wsfs token issue agent-1) wsfs write home/agent-1/notes.md hi"
    )]
    Issue { caller: String },
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Source directory (remote for pull, local for push).
    pub source: String,
    /// Destination directory (local for pull, remote for push).
    pub destination: String,
    /// Remove files and directories that exist only on the destination.
    #[arg(long)]
    pub delete: bool,
    /// Print what would be done; change nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Transfers and hashes in flight at once.
    #[arg(short = 'j', long, default_value_t = 16)]
    pub jobs: usize,
    /// Only files whose path (relative to the source) matches this glob
    /// (repeatable; `*` stays in one segment, `**` spans them; a pattern
    /// without `/` matches names at any depth).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Leave out paths matching this glob (repeatable); an excluded
    /// directory is skipped whole, and never deleted by --delete.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_binary_suffixes_in_any_case() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("32m"), Ok(32 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("10mb"), Ok(10 << 20));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
    }

    #[test]
    fn malformed_or_overflowing_sizes_are_refused() {
        for bad in ["", "G", "1Q", "-1", "1.5G", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}

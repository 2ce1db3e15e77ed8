//! How the proxy reads files (bounded: a stray huge one is refused after
//! `max + 1` bytes; `state_file` is also refused when it is a device or a
//! FIFO) and opens those it writes (`log.file` and its rotations,
//! `state_file` and its temporary files): never through a symbolic link at
//! the path, never a device or a FIFO, and a new file only where nothing
//! is. In a directory another user can write, a link planted at a name the
//! proxy uses must not make it write over the file the link points to.
//! `check` opens an existing file with the very call `run` uses.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use rustix::rand::{GetRandomFlags, getrandom};

/// The bytes of the file at `path`, or `None` when it holds more than
/// `max`: a stray huge file is refused after reading `max + 1` bytes, not
/// all of it.
///
/// # Errors
/// Opening or reading the file.
pub(crate) fn read_bounded(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    use io::Read;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// An error naming what `path` is when it is there and not a regular file
/// (symbolic links followed): a device, a FIFO, a directory.
pub(crate) fn refuse_special_file(path: &Path) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", file_kind(&meta)),
        )),
        // Missing, or out of reach: opening it tells.
        _ => Ok(()),
    }
}

/// What a file that is not a regular one is, in a word.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Permission bits of a new file, before the umask takes its share.
const NEW_FILE_MODE: u32 = 0o666;

/// Attempts at a free temporary name before giving up: with 64 random
/// bits, a second attempt means someone is planting names.
const TEMP_ATTEMPTS: usize = 8;

/// Open `path` for appending, creating it when missing. A symbolic link
/// at `path` is refused, not followed; so is anything but a regular file.
///
/// # Errors
/// The open failed, or `path` is a link or not a regular file.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    open_for_append(path, OFlags::CREATE)
}

/// Open the file at `path` as [`open_append`] does, without creating it:
/// `None` when nothing is there. What `check` uses to tell whether `run`
/// will be able to open a log file that exists.
///
/// # Errors
/// As [`open_append`].
pub(crate) fn open_existing_append(path: &Path) -> io::Result<Option<File>> {
    match open_for_append(path, OFlags::empty()) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn open_for_append(path: &Path, create: OFlags) -> io::Result<File> {
    // NONBLOCK: a FIFO planted at the path fails at once instead of
    // waiting for a reader; it has no effect on a regular file.
    let flags = OFlags::WRONLY
        | OFlags::APPEND
        | OFlags::NOFOLLOW
        | OFlags::CLOEXEC
        | OFlags::NONBLOCK
        | create;
    let file = open(path, flags)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Create a new file at exactly `path`: an existing file or link there is
/// an error (`AlreadyExists`), never opened.
///
/// # Errors
/// The create failed.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    open(path, flags)
}

/// Create a new temporary file in the directory of `path`, named
/// `.<file name>.<16 random hex digits>.tmp`, as [`create_new`] does: its
/// name cannot be guessed ahead, and a name taken is skipped, not opened.
///
/// # Errors
/// The create failed, or every name tried was taken.
pub(crate) fn create_beside(path: &Path) -> io::Result<(File, PathBuf)> {
    let name = path
        .file_name()
        .unwrap_or(OsStr::new("file"))
        .to_string_lossy();
    let dir = parent_dir(path);
    for _ in 0..TEMP_ATTEMPTS {
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", random_u64()?));
        match create_new(&tmp) {
            Ok(file) => return Ok((file, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{TEMP_ATTEMPTS} temporary names in {} were all taken",
            dir.display()
        ),
    ))
}

/// Rename `from` to `to` only where nothing is at `to` (a file or a link
/// there stays as it is: `AlreadyExists`).
///
/// # Errors
/// The rename failed, or `to` is taken.
pub(crate) fn rename_new(from: &Path, to: &Path) -> io::Result<()> {
    match rustix::fs::renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // A file system without RENAME_NOREPLACE: look, then rename.
        Err(Errno::INVAL | Errno::NOSYS) => match std::fs::symlink_metadata(to) {
            Ok(_) => Err(io::ErrorKind::AlreadyExists.into()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::rename(from, to),
            Err(e) => Err(e),
        },
        Err(e) => Err(e.into()),
    }
}

/// The directory a file at `path` is in (`.` for a bare name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn open(path: &Path, flags: OFlags) -> io::Result<File> {
    match rustix::fs::open(path, flags, Mode::from_raw_mode(NEW_FILE_MODE)) {
        Ok(fd) => Ok(File::from(fd)),
        Err(Errno::LOOP) if is_link(path) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link: links are not followed for files pin-proxy writes; name the file itself",
        )),
        Err(e) => Err(e.into()),
    }
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

fn random_u64() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    let mut filled = 0;
    while filled < bytes.len() {
        match getrandom(&mut bytes[filled..], GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(u64::from_ne_bytes(bytes))
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;

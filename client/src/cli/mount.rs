//! `wsfs mount` and `wsfs unmount`: the FUSE mount of `wsfs_client::mount`
//! in the foreground, until Ctrl-C, SIGTERM or an unmount from anywhere.

use super::args::{MountArgs, UnmountArgs};
use super::{Ctx, Failure, Outcome};

#[cfg(target_os = "linux")]
pub async fn mount(ctx: &mut Ctx, args: MountArgs) -> Outcome {
    use tokio::signal::unix::{signal, SignalKind};
    use wsfs_client::mount::{MountError, MountOptions};
    let session = ctx.session().await?;
    let id = session.id().to_string();
    let options = MountOptions {
        read_only: args.read_only,
        ..MountOptions::default()
    };
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|e| Failure::Local(format!("cannot watch for SIGTERM: {e}")))?;
    let handle = wsfs_client::mount::mount(session, &args.dir, options)
        .await
        .map_err(|e| match e {
            MountError::Session(e) => Failure::Remote(e),
            local @ MountError::Local { .. } => Failure::Local(format!(
                "{local} (the directory must exist; mounting needs /dev/fuse and either root \
                 or fusermount3, from Debian's fuse3 package; in a container: --device \
                 /dev/fuse --cap-add SYS_ADMIN)"
            )),
        })?;
    let dir = args.dir.display().to_string();
    ctx.done(
        || format!("mounted session {id} at {dir}; Ctrl-C or `wsfs unmount {dir}` unmounts"),
        serde_json::json!({ "session": id, "dir": dir, "mounted": true }),
    )?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
        _ = handle.ended() => {}
    }
    tokio::task::spawn_blocking(move || handle.unmount())
        .await
        .map_err(|e| Failure::Local(format!("unmounting '{dir}' failed: {e}")))?
        .map_err(|e| Failure::Local(format!("unmounting '{dir}' failed: {e}")))
}

#[cfg(target_os = "linux")]
pub async fn unmount(ctx: &mut Ctx, args: UnmountArgs) -> Outcome {
    let dir = args.dir.display().to_string();
    wsfs_client::mount::unmount(&args.dir).map_err(|e| {
        // umount(2) says EINVAL for a directory nothing is mounted on.
        Failure::Local(if e.kind() == std::io::ErrorKind::InvalidInput {
            format!("'{dir}' is not a mount point")
        } else {
            format!("cannot unmount '{dir}': {e}")
        })
    })?;
    ctx.done(
        || format!("unmounted {dir}"),
        serde_json::json!({ "dir": dir, "unmounted": true }),
    )
}

#[cfg(not(target_os = "linux"))]
pub async fn mount(_ctx: &mut Ctx, _args: MountArgs) -> Outcome {
    Err(Failure::Usage("`wsfs mount` needs Linux (FUSE)".into()))
}

#[cfg(not(target_os = "linux"))]
pub async fn unmount(_ctx: &mut Ctx, _args: UnmountArgs) -> Outcome {
    Err(Failure::Usage("`wsfs unmount` needs Linux (FUSE)".into()))
}

"""A fake Hugging Face hub cache, laid out as huggingface_hub writes it (a real download made
offline): <hub>/models--org--name/ with blobs/<sha256> holding the file contents,
snapshots/<commit>/<path> relative symlinks into blobs/, and refs/main holding a commit hash."""
import hashlib
import os


def repo_dir(hub, repo_id):
    return os.path.join(hub, "models--" + repo_id.replace("/", "--"))


def add_snapshot(hub, repo_id, src_dir, commit, ref_main=False):
    """Copy every file under src_dir into the cache as snapshot `commit` of repo_id (blobs +
    symlinks); with ref_main, refs/main names it. Returns the snapshot directory."""
    repo = repo_dir(hub, repo_id)
    blobs = os.path.join(repo, "blobs")
    snap = os.path.join(repo, "snapshots", commit)
    os.makedirs(blobs, exist_ok=True)
    for root, _, files in os.walk(src_dir):
        for fn in files:
            src = os.path.join(root, fn)
            rel = os.path.relpath(src, src_dir)
            with open(src, "rb") as f:
                data = f.read()
            digest = hashlib.sha256(data).hexdigest()
            blob = os.path.join(blobs, digest)
            if not os.path.exists(blob):
                with open(blob, "wb") as f:
                    f.write(data)
            link = os.path.join(snap, rel)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
    if ref_main:
        os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write(commit)  # huggingface_hub writes the hash without a newline
    return snap


def commit_hash(seed):
    """A 40-hex-digit commit id."""
    return hashlib.sha1(str(seed).encode()).hexdigest()

//! Local disk ([`FilesystemBackend`](trellis_backend::FilesystemBackend)) beyond the conformance
//! suite: hard links (`links`), symlink swaps racing every operation (`races`), and special files
//! such as FIFOs (`special_files`).

mod links;
mod races;
mod special_files;

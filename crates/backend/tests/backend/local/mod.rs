//! Local disk ([`FilesystemBackend`](trellis_backend::FilesystemBackend)) beyond the conformance
//! suite: appends (`appends`), hard links (`links`), symlink swaps racing every operation (`races`), special files
//! such as FIFOs (`special_files`), streamed writes going to disk as they are read
//! (`streamed`), and which operations run on the calling task (`offload`).

mod appends;
mod links;
mod offload;
mod races;
mod special_files;
mod streamed;

//! Skills: parsing, discovery of libraries (local and S3), the catalog cache, rendering, the
//! middleware, changing bindings and the catalog shared by threads. `common` holds the discovery
//! helpers.

mod catalog_cache;
mod changing_bindings;
mod common;
mod discovery_library;
mod discovery_listing;
mod middleware;
mod parse;
mod render;
mod shared_catalog;

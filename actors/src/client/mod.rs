//! The client: how one is opened (`open`) from its configuration (`config`), the actor that
//! routes its async executes and keeps callback bindings (`actor`), the shared state its
//! handles read (`state`), the actor runtime's threads (`runtime`), and the guard whose drop
//! shuts it all down (`guard`).

pub mod actor;
pub mod config;
pub(crate) mod guard;
pub(crate) mod open;
pub mod runtime;
pub mod state;

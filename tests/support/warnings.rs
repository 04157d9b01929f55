//! Capturing the library's warnings in a test: a `tracing` subscriber that keeps the text of
//! every `WARN` (and `ERROR`) event emitted while it is the thread's default.
//!
//! ```ignore
//! let warnings = Warnings::default();
//! let _capture = tracing::subscriber::set_default(warnings.clone());
//! // ... on a current-thread runtime, so the library's events reach this thread ...
//! assert!(warnings.seen().iter().any(|w| w.contains("maxmemory")));
//! ```

use std::sync::{Arc, Mutex};

/// The warnings logged on this thread, as text (`field=value ` per field).
#[derive(Clone, Default)]
pub struct Warnings(pub Arc<Mutex<Vec<String>>>);

impl Warnings {
    /// The warnings so far.
    pub fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        *meta.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

//! Collects independent mistakes, so that one compile reports them all.

use syn::Error;

/// Every error found so far, combined into one.
#[derive(Default)]
pub(crate) struct Errors(Option<Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// The value, or `None` with its error recorded.
    pub(crate) fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    pub(crate) fn check(&mut self, result: syn::Result<()>) {
        self.ok(result);
    }

    /// `Err` with every error recorded, if there is any.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

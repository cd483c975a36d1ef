//! The models stay in step with the scripts: a script that changes, or a new
//! one, fails here until the models are reviewed against it and the record
//! in `model/src/scripts.rs` is updated.

use std::fs;
use std::path::Path;

use lockmacro_model::SCRIPTS;
use sha2::{Digest, Sha256};

#[test]
fn scripts_match_the_record() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../lockmacro-runtime/src/backend/scripts");
    let mut stale = Vec::new();
    let mut names: Vec<String> = fs::read_dir(&dir)
        .expect("the scripts' folder")
        .map(|entry| {
            entry
                .expect("a script")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".lua"))
        .collect();
    names.sort();
    for name in &names {
        let contents = fs::read(dir.join(name)).expect("a readable script");
        let hash: String = Sha256::digest(&contents)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        match SCRIPTS.iter().find(|s| s.name == *name) {
            Some(known) if known.sha256 == hash => {}
            Some(known) => stale.push(format!(
                "{name} changed: review the models {:?} against it, then record sha256 {hash} in model/src/scripts.rs",
                known.models
            )),
            None => stale.push(format!(
                "{name} is new: model it (or say in docs/model.md why not), then record sha256 {hash} in model/src/scripts.rs"
            )),
        }
    }
    for known in SCRIPTS {
        if !names.iter().any(|name| name == known.name) {
            stale.push(format!(
                "{} is gone: remove it from the record and its transitions",
                known.name
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "the models were checked against other scripts:\n{}",
        stale.join("\n")
    );
}

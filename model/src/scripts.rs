//! The record of the scripts the models were checked against: each script of
//! `lockmacro-runtime/src/backend/scripts/` with the SHA-256 of its contents
//! and the models that mirror it. The test `scripts_match_the_record` fails
//! when a script changes (or one is added) until the model is reviewed
//! against it and the hash here updated.

/// One script as the models know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Script {
    /// Its file name under `lockmacro-runtime/src/backend/scripts/`.
    pub name: &'static str,
    /// The SHA-256 of its contents, in lowercase hex, when last reviewed.
    pub sha256: &'static str,
    /// The models with transitions that mirror it; empty when none does
    /// (and why, in `docs/model.md`).
    pub models: &'static [&'static str],
}

/// Every script, as last reviewed against the models.
///
/// ```
/// let acquire = lockmacro_model::SCRIPTS.iter().find(|s| s.name == "acquire.lua");
/// assert!(acquire.is_some_and(|s| s.models.contains(&"Plain")));
/// ```
pub const SCRIPTS: &[Script] = &[
    script(
        "acquire.lua",
        "aa63cda9b2965939aed43779d3d5651dbd6b8898e02637b79039f058f55151ba",
        &["Plain", "Fences"],
    ),
    script(
        "acquire_fair.lua",
        "d002dd0a2076ae7e49f7faad35e068abb5e3b5370010abb99c5718bbaaac5a3e",
        &["Fair"],
    ),
    script(
        "acquire_shared.lua",
        "575fc6522e431bf4c3616977d73cde6515519d73b321123f3a8640f7d1f6faab",
        &["Shares"],
    ),
    script(
        "confirm.lua",
        "3ba1c6249752c49213c9b46d22895f17a68db6cc0270b4faa7b985f6030ba618",
        &["Fair"],
    ),
    script(
        "fence.lua",
        "f8a5604cc363e88c737ce5e462d814786bf5c91ccd72aef2300f02dccacb7f23",
        &["Fences"],
    ),
    script(
        "fenced_set.lua",
        "92749f22aff134a268af3a46cd8fff4716bc06835a3b91eed9dc9e505ac3b292",
        &[],
    ),
    script(
        "grant.lua",
        "8d6ebb0ad6a7340c881cd2716aa824ec25ab72ae237a8cf1d99c502f18d54b5e",
        &["Fair"],
    ),
    script(
        "leases.lua",
        "f66f4afe53efcf7e77e7ee3e664bcee5bc9fbfd648a57e0e8d4757a2224f3fb1",
        &["Plain", "Fair", "Shares"],
    ),
    script(
        "raise_fence.lua",
        "5fb682ed66339c9e0d8d8e841690782fc0856b2ef27c77238425338577258660",
        &[],
    ),
    script(
        "refresh.lua",
        "134406dd091a520bc18c131e501cde8c3e95d77320a0787e7495946edd21d72f",
        &["Plain", "Fair", "Shares"],
    ),
    script(
        "refresh_many.lua",
        "f7b1a5a628617020c881c40485e4c5fab234e64d80535d02d4bee380b5446858",
        &["Plain"],
    ),
    script(
        "release.lua",
        "c72af81706ce0c1ed79c6aa8db0a0ce2af87c0e73790753ff2f8491171dab70c",
        &["Plain", "Fair", "Shares", "Fences"],
    ),
    script(
        "release_announce.lua",
        "1d75a9fd3132219c4761e877de62f55df6ea176b00585f431aae1acf26ce4067",
        &["Plain", "Fair"],
    ),
    script(
        "remaining.lua",
        "11ec6d5089dadc876a2936e4e42478ca62b03266e02d328077292bbad9e55bae",
        &[],
    ),
    script(
        "waiters.lua",
        "2425dd5a421ad9ea92967d62902e7687c01e138e178ca375bffe6384b4873fe1",
        &["Plain", "Fair"],
    ),
];

const fn script(
    name: &'static str,
    sha256: &'static str,
    models: &'static [&'static str],
) -> Script {
    Script {
        name,
        sha256,
        models,
    }
}

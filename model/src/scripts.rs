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
        "b7a101a08820a88fd5ba1b31390f8aa27e5a66574191c12684bc5eb97974fccf",
        &["Plain", "Fences", "Kinds", "Scriptless"],
    ),
    script(
        "acquire_fair.lua",
        "08b849d0aff52b198fa09a74ad3e3a78e18133d5fd4ac52b16a90241d473db76",
        &["Fair"],
    ),
    script(
        "acquire_shared.lua",
        "ee61e5646875f27c062201bb55bc9d793e41e9e651e09638c1aa5c44632da844",
        &["Shares", "Kinds", "Scriptless"],
    ),
    script(
        "confirm.lua",
        "3ba1c6249752c49213c9b46d22895f17a68db6cc0270b4faa7b985f6030ba618",
        &["Fair"],
    ),
    script(
        "downgrade.lua",
        "fa993a54dbb760fee8fd924ac0a349a9620bedeabc0f569137bc625bf951ac64",
        &["Kinds"],
    ),
    script(
        "fence.lua",
        "b472d143819ef50f01bee3a3a964816d44468ed67dae788394798fde6645b672",
        &["Fences"],
    ),
    script(
        "fenced_set.lua",
        "fd5b6d1ce2d678f52d6a8562b30310be83445c039d353e34db2641248ad48835",
        &[],
    ),
    script(
        "force_release.lua",
        "b9414062d341b31a38f1d2e0f645af3bbddb81adc12052ce4a0c4b32e839b0ea",
        &["Kinds"],
    ),
    script(
        "grant.lua",
        "6afb889033b2d2073254e9045c2bd213c0b26dc5904a6f09c8c23ef185b5271c",
        &["Fair"],
    ),
    script(
        "inspect.lua",
        "4e802fb1f4eede72758d79efcf59d65b2dc8fe609172dbba4c9a3922db9fa4be",
        &[],
    ),
    script(
        "kinds.lua",
        "7504aabeb05da0b754e95e3e136d81cf96b1b82a3fa28c06eb269bc5a8eb645a",
        &["Kinds", "Scriptless"],
    ),
    script(
        "leases.lua",
        "f66f4afe53efcf7e77e7ee3e664bcee5bc9fbfd648a57e0e8d4757a2224f3fb1",
        &[
            "Plain",
            "Fair",
            "Shares",
            "Kinds",
            "Refreshes",
            "Scriptless",
        ],
    ),
    script(
        "mark.lua",
        "1817105082fe3da6a0d22646f4afddf87f4dfd730226ce19fde0f95020694e4f",
        &["Plain", "Fair"],
    ),
    script(
        "raise_fence.lua",
        "5fb682ed66339c9e0d8d8e841690782fc0856b2ef27c77238425338577258660",
        &[],
    ),
    script(
        "refresh.lua",
        "134406dd091a520bc18c131e501cde8c3e95d77320a0787e7495946edd21d72f",
        &[
            "Plain",
            "Fair",
            "Shares",
            "Kinds",
            "Refreshes",
            "Scriptless",
        ],
    ),
    script(
        "refresh_many.lua",
        "f7b1a5a628617020c881c40485e4c5fab234e64d80535d02d4bee380b5446858",
        &["Plain"],
    ),
    script(
        "release.lua",
        "8c74ffab32179aeee8c90d14567da50cf953346bcaea1c99801cdb5d5af2d28d",
        &["Plain", "Fair", "Shares", "Fences", "Kinds", "Scriptless"],
    ),
    script(
        "release_announce.lua",
        "ec3335e38917f435ea930ef644be40022f192d23c4d11645245a9b9294c7bdcf",
        &["Plain", "Fair"],
    ),
    script(
        "release_plain.lua",
        "3be661c66eaf06358cfc14db77f8acc6aa596d57b6ba225b2d6fa1ecdbdf8170",
        &["Plain"],
    ),
    script(
        "remaining.lua",
        "11ec6d5089dadc876a2936e4e42478ca62b03266e02d328077292bbad9e55bae",
        &[],
    ),
    script(
        "waiters.lua",
        "cfb28fb2e23c533aedf2a4aad104b216bfe3d5adcf2d28913c7fc41616aa9e95",
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

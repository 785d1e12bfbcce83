use super::*;
use crate::api::KuraInstanceStatus;

fn observed(applied_spec: Option<&str>, spec: &str, generation: i64) -> Observed {
    Observed {
        generation: Some(generation),
        spec_hash: Some(spec.into()),
        status: KuraInstanceStatus {
            applied_generation: Some(1),
            applied_spec_hash: applied_spec.map(str::to_string),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Issue 25: an edit of a window or a pause moves the generation but not
/// what the spec renders, so a change of the operator's waiting for its
/// window stays the operator's; a spec the hash says changed is the user's.
#[test]
fn origin_follows_what_the_spec_renders_not_its_generation() {
    assert_eq!(origin(&observed(Some("h1"), "h1", 2)), Origin::Operator);
    assert_eq!(origin(&observed(Some("h1"), "h2", 2)), Origin::User);
    assert_eq!(origin(&observed(Some("h1"), "h2", 1)), Origin::User);
    // Applied before the hash was recorded: the generation decides.
    assert_eq!(origin(&observed(None, "h1", 2)), Origin::User);
    assert_eq!(origin(&observed(None, "h1", 1)), Origin::Operator);
    // A new force token is the user's whatever the hash says.
    let mut forced = observed(Some("h1"), "h1", 1);
    forced.force_token = Some("now".into());
    assert_eq!(origin(&forced), Origin::User);
}

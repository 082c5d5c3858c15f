//! "Did you mean" for names (unknown fields, kinds, references): the closest known name, when
//! it is close enough to be the intended one.

/// The candidate closest to `wrong`: an exact match ignoring case and `_`/`-` (so
/// `pxe_vlan_vid` finds `pxeVlanVid`), else the most similar by Jaro-Winkler above 0.8.
pub fn did_you_mean<'a>(
    wrong: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let normalise = |s: &str| {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    let wanted = normalise(wrong);
    let mut best: Option<(f64, &'a str)> = None;
    for candidate in candidates {
        if normalise(candidate) == wanted {
            return Some(candidate);
        }
        let score = strsim::jaro_winkler(&wanted, &normalise(candidate));
        if score > 0.8 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_typos_and_case_slips_only() {
        let fields = ["pxeIface", "pxeVlanVid", "nodePxeIface", "upstreamDns"];
        assert_eq!(did_you_mean("pxe_vlan_vid", fields), Some("pxeVlanVid"));
        assert_eq!(did_you_mean("upstreamDNS", fields), Some("upstreamDns"));
        assert_eq!(did_you_mean("pxeIfase", fields), Some("pxeIface"));
        assert_eq!(did_you_mean("colour", fields), None);
        assert_eq!(
            did_you_mean("Nodegroup", ["Site", "Profile", "Node", "NodeGroup"]),
            Some("NodeGroup")
        );
    }
}

//! Compute resources: quantities as the apiserver parses them, an instance's own
//! amounts merged field by field over its region's defaults, and the merged limits
//! covering the merged requests (the apiserver refuses a pod template otherwise, so
//! an own limit below a defaulted request must be caught here).

use super::{FieldError, matches};
use crate::api::instance::{CPU_QUANTITY, MEMORY_QUANTITY, ResourceAmounts, ResourcesSpec};

/// The syntax of every amount; shared by the configuration's defaults and an
/// instance's own resources.
pub(crate) fn check_syntax(path: &str, resources: &ResourcesSpec, errs: &mut Vec<FieldError>) {
    let check = |part: &str, amounts: &Option<ResourceAmounts>, errs: &mut Vec<FieldError>| {
        let Some(a) = amounts else { return };
        if let Some(cpu) = &a.cpu
            && !matches(CPU_QUANTITY, cpu)
        {
            errs.push(FieldError::new(
                format!("{path}.{part}.cpu"),
                format!("{cpu:?} is not a CPU quantity such as 250m or 1.5"),
            ));
        }
        if let Some(mem) = &a.memory
            && !matches(MEMORY_QUANTITY, mem)
        {
            errs.push(FieldError::new(
                format!("{path}.{part}.memory"),
                format!("{mem:?} is not a memory quantity such as 512Mi"),
            ));
        }
    };
    check("requests", &resources.requests, errs);
    check("limits", &resources.limits, errs);
}

/// Resources and where they are written: `spec.resources` or a region's defaults.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub resources: &'a ResourcesSpec,
    pub path: &'a str,
}

/// One merged amount and where it came from.
struct Amount<'a> {
    value: &'a str,
    path: String,
    own: bool,
}

/// Every merged limit is at least its merged request. `own` wins over `defaults`
/// field by field; the error names the field the user can change.
pub(crate) fn check_limits_cover_requests<'a>(
    own: Source<'a>,
    defaults: Option<Source<'a>>,
    errs: &mut Vec<FieldError>,
) {
    type Parse = fn(&str) -> Option<u128>;
    let resources: [(&str, Parse); 2] = [("cpu", cpu_millis), ("memory", memory_bytes)];
    for (resource, parse) in resources {
        let pick = |part: &str| {
            let from = |s: Source<'a>, own: bool| {
                let value = amount(s.resources, part, resource)?;
                let path = format!("{}.{part}.{resource}", s.path);
                Some(Amount { value, path, own })
            };
            from(own, true).or_else(|| from(defaults?, false))
        };
        let (Some(request), Some(limit)) = (pick("requests"), pick("limits")) else {
            continue;
        };
        let (Some(req), Some(lim)) = (parse(request.value), parse(limit.value)) else {
            continue; // a syntax error, reported on its own
        };
        if lim >= req {
            continue;
        }
        let (path, message) = match (limit.own, request.own) {
            (true, true) => (
                limit.path,
                format!(
                    "{} must be at least {} ({})",
                    limit.value, request.path, request.value
                ),
            ),
            (true, false) => (
                limit.path,
                format!(
                    "{} must be at least the request {} defaulted from {}",
                    limit.value, request.value, request.path
                ),
            ),
            (false, true) => (
                request.path,
                format!(
                    "{} must be at most the limit {} defaulted from {}",
                    request.value, limit.value, limit.path
                ),
            ),
            // Both defaults: the configuration's own validation reports it.
            (false, false) => continue,
        };
        errs.push(FieldError::new(path, message));
    }
}

fn amount<'a>(resources: &'a ResourcesSpec, part: &str, resource: &str) -> Option<&'a str> {
    let amounts = match part {
        "requests" => resources.requests.as_ref(),
        _ => resources.limits.as_ref(),
    }?;
    match resource {
        "cpu" => amounts.cpu.as_deref(),
        _ => amounts.memory.as_deref(),
    }
}

/// Millicores of a quantity matching CPU_QUANTITY (`250m`, `1.5`).
fn cpu_millis(q: &str) -> Option<u128> {
    if let Some(m) = q.strip_suffix('m') {
        return m.parse().ok();
    }
    let (whole, frac) = q.split_once('.').unwrap_or((q, ""));
    let frac = format!("{frac:0<3}");
    Some(whole.parse::<u128>().ok()? * 1000 + frac.get(..3)?.parse::<u128>().ok()?)
}

/// Bytes of a quantity matching MEMORY_QUANTITY, exactly: the largest (999999999Ti)
/// does not fit in 64 bits.
fn memory_bytes(q: &str) -> Option<u128> {
    let units = [
        ("Ki", 1u128 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ];
    for (suffix, factor) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u128>().ok()?.checked_mul(factor);
        }
    }
    q.parse().ok()
}

/// The instance's own amounts win, field by field, over the region's defaults.
pub(crate) fn merge(own: Option<&ResourcesSpec>, defaults: &ResourcesSpec) -> ResourcesSpec {
    let pick =
        |o: Option<&ResourceAmounts>, d: Option<&ResourceAmounts>| -> Option<ResourceAmounts> {
            let cpu = o
                .and_then(|a| a.cpu.clone())
                .or_else(|| d.and_then(|a| a.cpu.clone()));
            let memory = o
                .and_then(|a| a.memory.clone())
                .or_else(|| d.and_then(|a| a.memory.clone()));
            (cpu.is_some() || memory.is_some()).then_some(ResourceAmounts { cpu, memory })
        };
    let own = own.cloned().unwrap_or_default();
    ResourcesSpec {
        requests: pick(own.requests.as_ref(), defaults.requests.as_ref()),
        limits: pick(own.limits.as_ref(), defaults.limits.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_exactly_across_notations_and_beyond_64_bits() {
        assert_eq!(cpu_millis("1.5"), cpu_millis("1500m"));
        assert_eq!(cpu_millis("0.001"), Some(1));
        assert_eq!(memory_bytes("1Gi"), memory_bytes("1024Mi"));
        assert!(memory_bytes("999999999Ti") > memory_bytes("999999998Ti"));
        assert!(memory_bytes("999999999Ti").unwrap() > u128::from(u64::MAX));
    }
}

//! `--map NAME=MODEL`: how an importer names the catalog model behind another tool's GPU name
//! (a Slurm gres type, a Kueue flavor, a Kubernetes product label), each model checked
//! against the catalog before anything is read with it.

use crate::SpecError;
use gantry_catalog::Catalog;
use std::collections::BTreeMap;

/// The `NAME=MODEL` pairs as a map from name to catalog model.
pub fn model_map(pairs: &[String], catalog: &Catalog) -> Result<BTreeMap<String, String>, SpecError> {
    let mut map = BTreeMap::new();
    for pair in pairs {
        let field = format!("--map {pair:?}");
        let Some((name, model)) = pair.split_once('=') else {
            return Err(SpecError::new(field, "write NAME=MODEL"));
        };
        if catalog.lookup(model).is_none() {
            return Err(SpecError::new(
                field,
                format!("{model:?} is not a catalog model (`gantry catalog` lists them)"),
            ));
        }
        map.insert(name.to_string(), model.to_string());
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_name_catalog_models() {
        let catalog = Catalog::embedded();
        let map = model_map(&["a100=A100-SXM4-80GB".into()], catalog).expect("a catalog model");
        assert_eq!(map["a100"], "A100-SXM4-80GB");
        let err = model_map(&["a100".into()], catalog).expect_err("no =");
        assert_eq!(err.to_string(), "--map \"a100\": write NAME=MODEL");
        let err = model_map(&["x=Z9000".into()], catalog).expect_err("not in the catalog");
        assert!(err.to_string().contains("\"Z9000\" is not a catalog model"), "{err}");
    }
}

//! Weight files for an export's parameters: `.safetensors` read with the `safetensors` crate,
//! and the dotted names (`layer0.w`) weight files give pytree paths.

use pjrt_actors_core::Result;

use super::refused;
use crate::ElementType;
use crate::host_data::HostArray;

/// `[0]['layer0']['w']` as `0.layer0.w`: how weight files name a parameter.
pub fn dotted_path(path: &str) -> String {
    (path.split(['[', ']']).filter(|s| !s.is_empty()))
        .map(|s| s.trim_matches('\''))
        .collect::<Vec<_>>()
        .join(".")
}

/// A `.safetensors` file's tensors, by name.
pub(super) fn read_safetensors(bytes: &[u8]) -> Result<Vec<(String, HostArray)>> {
    let file = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| refused(format!("a .safetensors file that cannot be read: {e}")))?;
    (file.tensors().into_iter())
        .map(|(name, tensor)| {
            let dtype = element_type(tensor.dtype()).ok_or_else(|| {
                refused(format!(
                    "the weight `{name}` is {:?}, which we do not take",
                    tensor.dtype()
                ))
            })?;
            let data = HostArray {
                dtype,
                dims: tensor.shape().iter().map(|&d| d as i64).collect(),
                bytes: tensor.data().to_vec(),
            };
            Ok((name, data))
        })
        .collect()
}

fn element_type(d: safetensors::Dtype) -> Option<ElementType> {
    use safetensors::Dtype as D;
    Some(match d {
        D::BOOL => ElementType::Pred,
        D::U8 => ElementType::U8,
        D::I8 => ElementType::S8,
        D::I16 => ElementType::S16,
        D::U16 => ElementType::U16,
        D::F16 => ElementType::F16,
        D::BF16 => ElementType::BF16,
        D::I32 => ElementType::S32,
        D::U32 => ElementType::U32,
        D::F32 => ElementType::F32,
        D::F64 => ElementType::F64,
        D::I64 => ElementType::S64,
        D::U64 => ElementType::U64,
        D::F8_E5M2 => ElementType::F8E5M2,
        _ => return None,
    })
}

# Shared by the bench/ scripts (sourced): the reference models, batch 1, as "name model shape-spec"
# (shape spec NAME:DIMS,... as kiln's --shapes takes it), and a progress line shown on a terminal only.
MODELS=(
  "resnet50 models/resnet50.onnx input:1x3x224x224"
  "bert_base models/bert_base.onnx input_ids:1x128,attention_mask:1x128,token_type_ids:1x128"
  "ocr_det models/ocr/ch_PP-OCRv4_det_infer.onnx x:1x3x640x640"
  "ocr_rec models/ocr/ch_PP-OCRv4_rec_infer.onnx x:1x3x48x320"
  "ocr_cls models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx x:1x3x48x192"
)
log() { [ -t 2 ] && printf '\r\033[K%s' "$*" >&2 || true; }

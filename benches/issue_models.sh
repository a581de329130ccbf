# Sourced by the whole-model benches (from the repository's root): the ten models issue 31
# measures, as paths into the corpus, in `issue_models`.
issue_models=()
for m in torchvision_graph_only/resnet18 torchvision_graph_only/resnet50 \
         torchvision_graph_only/mobilenet_v2 torchvision_more/mobilenet_v3_small \
         torchvision_more/regnet_y_400mf torchvision_more/efficientnet_b1 \
         torchvision_more/shufflenet_v2_x1_0 \
         torchvision_more/convnext_tiny torchvision_more/vit_b_16 transformers/distilbert_like; do
    issue_models+=("../shared/corpus/onnx/$m.onnx")
done

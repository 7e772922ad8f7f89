package v1alpha1

// The images of the vLLM pod's containers that come from the operator's
// defaults are recorded on the LLMEndpoint the first time it runs them, and
// read from there afterwards: an operator upgrade that brings new defaults
// would otherwise roll every endpoint's instances (and drop their caches)
// at once. A user takes the new default by removing the annotation.
const (
	// AnnotationVLLMImage is the default vLLM image recorded for an
	// endpoint without spec.model.image.
	AnnotationVLLMImage = "serving.warmroute.dev/vllm-image"
	// AnnotationLoRAAgentImage is the recorded image of the LoRA agent,
	// which runs in the vLLM pods. A recorded agent reads the routing
	// documents of every later operator, and decodes them strictly: a
	// release that adds a field the agent reads must move this record (a
	// rollout of the instances it announces) or keep the field out of the
	// documents older agents see.
	AnnotationLoRAAgentImage = "serving.warmroute.dev/lora-agent-image"
)

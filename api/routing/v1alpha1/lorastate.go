package v1alpha1

import (
	"encoding/json"
	"fmt"
)

// AnnotationLoRAState is the annotation in which the LoRA agent of a vLLM
// pod reports which adapters that instance holds. The operator reads it
// (it already watches the pods) to decide where each adapter is Ready.
const AnnotationLoRAState = "serving.warmroute.dev/lora-state"

// LoRAState is what one instance's LoRA agent last observed.
type LoRAState struct {
	// Loaded are the adapters vLLM lists in /v1/models, sorted.
	Loaded []string `json:"loaded,omitempty"`
	// Failed are desired adapters whose last load failed, sorted by name.
	Failed []LoRAFailure `json:"failed,omitempty"`
}

// LoRAFailure is an adapter an instance could not load.
type LoRAFailure struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// ParseLoRAState reads the annotation value; an empty value is an empty
// state.
func ParseLoRAState(value string) (LoRAState, error) {
	var s LoRAState
	if value == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return LoRAState{}, fmt.Errorf("parse %s: %w", AnnotationLoRAState, err)
	}
	return s, nil
}

// Encode renders the state as the annotation's value.
func (s LoRAState) Encode() string {
	b, _ := json.Marshal(s) // strings only: cannot fail
	return string(b)
}

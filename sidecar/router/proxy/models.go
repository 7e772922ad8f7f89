package proxy

import (
	"encoding/json"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// model is one entry of the OpenAI model list, in vLLM's shape (an adapter
// names its base model as parent).
type model struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  *string `json:"parent"`
}

// modelList renders the /v1/models answer of a document once, when it is
// applied: the base model and each adapter ready on at least one instance.
func modelList(doc *routingv1alpha1.Document, loaded time.Time) []byte {
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{{ID: doc.Model, Object: "model", Created: loaded.Unix(), OwnedBy: "vllm", Root: doc.Model}}}
	for _, a := range doc.Adapters {
		if len(a.Ready) == 0 {
			continue
		}
		root := a.URI
		if root == "" {
			root = a.Name
		}
		list.Data = append(list.Data, model{ID: a.Name, Object: "model", Created: loaded.Unix(), OwnedBy: "vllm", Root: root, Parent: &doc.Model})
	}
	b, _ := json.Marshal(list) // plain strings: cannot fail
	return b
}

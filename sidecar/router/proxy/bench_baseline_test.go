//go:build benchstrategies

package proxy

import "github.com/warmroute/warmroute/sidecar/router/policy"

func init() { decisionStrategies = append(decisionStrategies, policy.Baseline) }

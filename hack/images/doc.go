/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package images builds container images from Go binaries without a
// container engine or a registry, the way ko does: a static binary (BuildGo)
// on a minimal base (Base: passwd, group, CA roots), as a non-root numeric
// user with fixed timestamps, so that the same source gives the same digest
// (FromBinary). WriteTarball writes docker-save tarballs that containerd's
// `ctr images import` and `kind load image-archive` load; Index and
// WriteLayout write multi-platform OCI layouts to push.
//
// Warmroute's own images (Targets, BuildBinaries, Target.Image) are what `make images` builds
// through cmd/images; other tools build theirs (a pause image, CoreDNS, test
// images) with the same functions.
package images

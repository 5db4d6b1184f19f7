#!/usr/bin/env node
// The `reverie` command. Our sources are TypeScript run through tsx's loader (no build step).
import { register } from 'tsx/esm/api';

register();
await import('../control/main.ts');

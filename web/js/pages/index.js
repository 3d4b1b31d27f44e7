// The pages, by route name (`#/<name>/...`).
export * as events from './events.js';
export * as fabric from './fabric.js';
export * as flow from './flow.js';
export * as flows from './flows.js';
export * as incident from './incident.js';
export * as incidents from './incidents.js';
export * as overview from './overview.js';
export * as queues from './queues.js';
